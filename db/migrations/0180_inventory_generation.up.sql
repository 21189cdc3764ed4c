-- The inventory generation (docs/inventory.md, "Listings at site scale"):
-- a number that grows whenever a transaction that wrote the inventory
-- (racks, components, BMCs, NVLink domains, leak status) commits, so that
-- a built listing page can be reused while it has not changed, by every
-- replica. It is the sum of n over the shards: a writing transaction bumps
-- one shard, chosen by its transaction ID, once, at commit (a deferred
-- trigger), so concurrent writers rarely share a row and the row lock is
-- taken last, after every other lock of the transaction (no deadlock with
-- them), and held only while it commits.
CREATE TABLE inventory_generation (
    shard smallint PRIMARY KEY,
    n bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 20);

INSERT INTO inventory_generation (shard) SELECT generate_series(0, 15);

CREATE FUNCTION inventory_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    xid text := pg_current_xact_id()::text;
BEGIN
    -- Once per transaction, however many rows it wrote.
    IF current_setting('flow.inventory_generation_xid', true) IS DISTINCT FROM xid THEN
        PERFORM set_config('flow.inventory_generation_xid', xid, true);
        UPDATE inventory_generation SET n = n + 1 WHERE shard = xid::bigint % 16;
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER rack_generation AFTER INSERT OR UPDATE OR DELETE ON rack
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inventory_generation_bump();
CREATE CONSTRAINT TRIGGER component_generation AFTER INSERT OR UPDATE OR DELETE ON component
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inventory_generation_bump();
CREATE CONSTRAINT TRIGGER bmc_generation AFTER INSERT OR UPDATE OR DELETE ON bmc
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inventory_generation_bump();
CREATE CONSTRAINT TRIGGER nvl_domain_generation AFTER INSERT OR UPDATE OR DELETE ON nvl_domain
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inventory_generation_bump();
CREATE CONSTRAINT TRIGGER component_leak_generation AFTER INSERT OR UPDATE OR DELETE ON component_leak
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inventory_generation_bump();

-- Constraint triggers cannot fire on TRUNCATE: these bump at once.
CREATE TRIGGER rack_generation_truncate AFTER TRUNCATE ON rack
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_generation_bump();
CREATE TRIGGER component_generation_truncate AFTER TRUNCATE ON component
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_generation_bump();
CREATE TRIGGER bmc_generation_truncate AFTER TRUNCATE ON bmc
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_generation_bump();
CREATE TRIGGER nvl_domain_generation_truncate AFTER TRUNCATE ON nvl_domain
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_generation_bump();
CREATE TRIGGER component_leak_generation_truncate AFTER TRUNCATE ON component_leak
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_generation_bump();
