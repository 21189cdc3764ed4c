ALTER TABLE component_firmware_read DROP COLUMN due;
