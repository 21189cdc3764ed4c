-- Leak safety (docs/event-rules.md): a leaking component stays off until
-- Core stops reporting its leak or an admin overrides it for that leak.

-- detected_at is when the component's current leak was first seen (NULL
-- while not detected); the override columns record an admin's explicit,
-- audited override of the energise guard for the current leak, cleared
-- when the status changes.
ALTER TABLE component_leak
    ADD COLUMN detected_at     timestamptz,
    ADD COLUMN override_reason text,
    ADD COLUMN override_by     text,
    ADD COLUMN override_at     timestamptz;

UPDATE component_leak SET detected_at = updated_at WHERE status = 'detected';

-- What leak detection did for an occurrence on a device Flow does not
-- hold: 'pending', then the outcome of the forced power-off through Core by
-- the device's Core ID; '' for a device Flow holds (or not looked at yet).
ALTER TABLE leak_occurrence
    ADD COLUMN unknown_outcome text NOT NULL DEFAULT '';
