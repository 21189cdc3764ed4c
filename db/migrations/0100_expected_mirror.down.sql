ALTER TABLE nvl_domain DROP COLUMN deleted_at;
ALTER TABLE component DROP COLUMN mirrored_at;
ALTER TABLE rack DROP COLUMN mirrored_at;
