-- Flow's schema starts here. Each domain adds its tables in its own
-- migrations; River's tables are created by rivermigrate (flow db migrate).

-- flow_instance records when this database was first set up for Flow.
CREATE TABLE flow_instance (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO flow_instance DEFAULT VALUES;
