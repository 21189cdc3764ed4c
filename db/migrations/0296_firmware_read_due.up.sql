-- A firmware task that ended makes its types' installed versions due for
-- the next sync cycle, whatever FLOW_FIRMWARE_READ_INTERVAL says, so the
-- compliance report shows a campaign's outcome within a cycle.
ALTER TABLE component_firmware_read ADD COLUMN due boolean NOT NULL DEFAULT false;
