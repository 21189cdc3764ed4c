-- Which racks' console cells changed (console/read.go, docs/console.md
-- "At 15,000 racks"): the overview and the floor map keep every rack's
-- cell (components by power, leaks, health, firmware; running, queued and
-- last-failed tasks) and, after a change, read again only the racks whose
-- rows changed, not the whole site's 525,000 components.
--
-- Each writing statement appends the racks it touched, with its
-- transaction's ID: a reader that kept the snapshot of its last read
-- (pg_current_snapshot) asks for the rows whose transaction that snapshot
-- did not see (pg_visible_in_snapshot), which is exact whatever the commit
-- order, and writers never wait on each other here (appends only). A
-- TRUNCATE appends the nil UUID: read everything again. The prune job
-- deletes rows older than an hour (app/prune.go); a reader whose snapshot
-- is older than that reads everything again.
CREATE TABLE rack_cell_change (
    xid     xid8        NOT NULL DEFAULT pg_current_xact_id(),
    rack_id uuid        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX rack_cell_change_xid ON rack_cell_change (xid);
CREATE INDEX rack_cell_change_at ON rack_cell_change USING brin (at);

-- Components: a component added, removed, or changed in what a cell
-- shows (its rack, type, power, firmware, health, deletion).
CREATE FUNCTION rack_cell_change_component() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO rack_cell_change (rack_id) SELECT DISTINCT rack_id FROM new_rows WHERE rack_id IS NOT NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO rack_cell_change (rack_id) SELECT DISTINCT rack_id FROM old_rows WHERE rack_id IS NOT NULL;
    ELSE
        INSERT INTO rack_cell_change (rack_id)
        SELECT DISTINCT x.rack_id
        FROM new_rows n JOIN old_rows o ON o.id = n.id, LATERAL (VALUES (n.rack_id), (o.rack_id)) x (rack_id)
        WHERE x.rack_id IS NOT NULL
          AND (n.rack_id, n.type, n.power_state, n.firmware_version, n.health::text, n.deleted_at)
              IS DISTINCT FROM (o.rack_id, o.type, o.power_state, o.firmware_version, o.health::text, o.deleted_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER component_cell_insert AFTER INSERT ON component REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_component();
CREATE TRIGGER component_cell_update AFTER UPDATE ON component REFERENCING NEW TABLE AS new_rows OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_component();
CREATE TRIGGER component_cell_delete AFTER DELETE ON component REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_component();

-- Leak status: the component's rack.
CREATE FUNCTION rack_cell_change_leak() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO rack_cell_change (rack_id)
        SELECT DISTINCT c.rack_id FROM new_rows n JOIN component c ON c.id = n.component_id WHERE c.rack_id IS NOT NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO rack_cell_change (rack_id)
        SELECT DISTINCT c.rack_id FROM old_rows o JOIN component c ON c.id = o.component_id WHERE c.rack_id IS NOT NULL;
    ELSE
        INSERT INTO rack_cell_change (rack_id)
        SELECT DISTINCT c.rack_id
        FROM new_rows n JOIN old_rows o ON o.component_id = n.component_id JOIN component c ON c.id = n.component_id
        WHERE c.rack_id IS NOT NULL AND n.status IS DISTINCT FROM o.status;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER component_leak_cell_insert AFTER INSERT ON component_leak REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_leak();
CREATE TRIGGER component_leak_cell_update AFTER UPDATE ON component_leak REFERENCING NEW TABLE AS new_rows OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_leak();
CREATE TRIGGER component_leak_cell_delete AFTER DELETE ON component_leak REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_leak();

-- Racks: added, removed, renamed, moved, health, power feed and coolant
-- loop, deletion.
CREATE FUNCTION rack_cell_change_rack() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO rack_cell_change (rack_id) SELECT id FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO rack_cell_change (rack_id) SELECT id FROM old_rows;
    ELSE
        INSERT INTO rack_cell_change (rack_id)
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE (n.name, n.location_room, n.location_position, n.health::text, n.power_feed, n.coolant_loop, n.deleted_at)
              IS DISTINCT FROM (o.name, o.location_room, o.location_position, o.health::text, o.power_feed, o.coolant_loop, o.deleted_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER rack_cell_insert AFTER INSERT ON rack REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_rack();
CREATE TRIGGER rack_cell_update AFTER UPDATE ON rack REFERENCING NEW TABLE AS new_rows OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_rack();
CREATE TRIGGER rack_cell_delete AFTER DELETE ON rack REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_rack();

-- Tasks: created, removed (pruned), or their status changed (queued,
-- started, ended: the running, queued and last-failed columns). A task's
-- other updates (its report, its progress) are not the cells', and a
-- row trigger with a WHEN costs them nothing.
CREATE FUNCTION rack_cell_change_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO rack_cell_change (rack_id) SELECT DISTINCT rack_id FROM new_rows;
    ELSE
        INSERT INTO rack_cell_change (rack_id) SELECT DISTINCT rack_id FROM old_rows;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION rack_cell_change_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rack_cell_change (rack_id) VALUES (NEW.rack_id);
    IF OLD.rack_id IS DISTINCT FROM NEW.rack_id THEN
        INSERT INTO rack_cell_change (rack_id) VALUES (OLD.rack_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_cell_insert AFTER INSERT ON task REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_tasks();
CREATE TRIGGER task_cell_delete AFTER DELETE ON task REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_tasks();
CREATE TRIGGER task_cell_status AFTER UPDATE OF status, rack_id ON task
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.rack_id IS DISTINCT FROM NEW.rack_id)
    EXECUTE FUNCTION rack_cell_change_task();

-- A TRUNCATE: every rack.
CREATE FUNCTION rack_cell_change_all() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rack_cell_change (rack_id) VALUES ('00000000-0000-0000-0000-000000000000');
    RETURN NULL;
END
$$;

CREATE TRIGGER component_cell_truncate AFTER TRUNCATE ON component FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_all();
CREATE TRIGGER component_leak_cell_truncate AFTER TRUNCATE ON component_leak FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_all();
CREATE TRIGGER rack_cell_truncate AFTER TRUNCATE ON rack FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_all();
CREATE TRIGGER task_cell_truncate AFTER TRUNCATE ON task FOR EACH STATEMENT EXECUTE FUNCTION rack_cell_change_all();
