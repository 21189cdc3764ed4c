ALTER TABLE leak_occurrence
    DROP COLUMN IF EXISTS unknown_outcome;
ALTER TABLE component_leak
    DROP COLUMN IF EXISTS override_at,
    DROP COLUMN IF EXISTS override_by,
    DROP COLUMN IF EXISTS override_reason,
    DROP COLUMN IF EXISTS detected_at;
