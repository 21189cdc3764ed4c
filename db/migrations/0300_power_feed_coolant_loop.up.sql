-- Power feeds and coolant loops (issue 45; docs/operations.md "Feeds, loops
-- and power budgets"). A rack draws on one power feed (a busway, PDU or row
-- feed: a name; its hall is the racks' location_room, so the hierarchy is
-- site -> hall -> feed) and sits on one coolant loop (its CDU's loop). NULL:
-- not known. Set from expected-rack files, the admin API (SetRackPlacement)
-- and the CLI (flow rack set).
ALTER TABLE rack
    ADD COLUMN power_feed text NULL CONSTRAINT rack_power_feed_check CHECK (power_feed <> ''),
    ADD COLUMN coolant_loop text NULL CONSTRAINT rack_coolant_loop_check CHECK (coolant_loop <> '');

CREATE INDEX rack_power_feed_idx ON rack (power_feed) WHERE power_feed IS NOT NULL AND deleted_at IS NULL;
CREATE INDEX rack_coolant_loop_idx ON rack (coolant_loop) WHERE coolant_loop IS NOT NULL AND deleted_at IS NULL;

-- A feed's power budget: at most max_transitions power transitions (power
-- on, power cycle, reset, AC cycle, a rebooting firmware step) in progress
-- at once on its racks, and optionally at most max_kw of surge draw (the
-- rack profile's per-tray and per-shelf figures). A feed without a row has
-- no budget.
CREATE TABLE power_budget (
    feed text PRIMARY KEY CHECK (feed <> ''),
    max_transitions integer NOT NULL CHECK (max_transitions >= 1),
    max_kw double precision CHECK (max_kw > 0),
    updated_by text NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
