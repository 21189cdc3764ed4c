-- The expected-inventory mirror (docs/inventory-sync.md): NICo Core's
-- expected racks and components, mirrored into Flow's inventory.
--
-- mirrored_at is when the mirror first created or adopted the row (NULL: a
-- row of Flow's own that Core never listed). Only mirrored rows are
-- soft-deleted when Core stops listing them; Flow's own rows (created with
-- CreateExpectedRack and not yet ingested) are left alone.
ALTER TABLE rack ADD COLUMN mirrored_at timestamptz;
ALTER TABLE component ADD COLUMN mirrored_at timestamptz;

-- A domain the observed NVLink topology created is soft-deleted when a
-- regrouping leaves it with no rack, and resurrected (same UUID) when its
-- rack group comes back.
ALTER TABLE nvl_domain ADD COLUMN deleted_at timestamptz;
