-- Operation rules (spec/execution.md §7): how an operation (type + code) runs,
-- as numbered stages of per-component-type steps. The definition is stored as
-- validated, normalised JSON (version "v1").
CREATE TABLE operation_rule (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text        NOT NULL CHECK (name <> ''),
    description     text        NOT NULL DEFAULT '',
    operation_type  text        NOT NULL CHECK (operation_type IN
                        ('inject_expectation', 'power_control', 'firmware_control', 'bring_up', 'decommission')),
    operation_code  text        NOT NULL CHECK (operation_code <> ''),
    rule_definition jsonb       NOT NULL,
    is_default      boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Target of the composite foreign key below, so an association always
    -- carries its rule's own type and code.
    CONSTRAINT operation_rule_id_type_code_key UNIQUE (id, operation_type, operation_code)
);

-- At most one default rule per (type, code).
CREATE UNIQUE INDEX operation_rule_one_default ON operation_rule (operation_type, operation_code) WHERE is_default;

-- ListOperationRules order.
CREATE INDEX operation_rule_created_at_id ON operation_rule (created_at DESC, id DESC);

-- Rack-rule associations: at most one rule per (rack, type, code). The rack
-- lives in inventory; there is deliberately no foreign key to it from here
-- (the service checks the rack exists through a lookup it is given).
-- A rule that is still associated with a rack cannot be deleted (RESTRICT):
-- the service answers FailedPrecondition naming the racks.
CREATE TABLE rack_rule_association (
    rack_id        uuid        NOT NULL,
    operation_type text        NOT NULL,
    operation_code text        NOT NULL,
    rule_id        uuid        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rack_id, operation_type, operation_code),
    CONSTRAINT rack_rule_association_rule_fkey FOREIGN KEY (rule_id, operation_type, operation_code)
        REFERENCES operation_rule (id, operation_type, operation_code) ON DELETE RESTRICT
);

CREATE INDEX rack_rule_association_rule_id ON rack_rule_association (rule_id);
