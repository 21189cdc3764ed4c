ALTER TABLE engine_step DROP COLUMN first_claimed_at;
