-- component_firmware_generation grows whenever a statement writes
-- component_firmware (installed versions recorded, or rows cascaded away),
-- so that a compliance snapshot built at one generation can be reused
-- while it holds (docs/firmware.md, "Compliance at site scale"). Unlike
-- the inventory generation it is not read by the rack listings, which
-- show no installed versions. The sync writes it once per part at most.
CREATE TABLE component_firmware_generation (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    n bigint NOT NULL DEFAULT 0
);

INSERT INTO component_firmware_generation DEFAULT VALUES;

CREATE FUNCTION component_firmware_generation_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE component_firmware_generation SET n = n + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER component_firmware_generation AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON component_firmware
    FOR EACH STATEMENT EXECUTE FUNCTION component_firmware_generation_bump();
