-- A rack-rule association belongs to its rack: purging the rack removes it.
ALTER TABLE rack_rule_association
    ADD CONSTRAINT rack_rule_association_rack_fk
    FOREIGN KEY (rack_id) REFERENCES rack (id) ON DELETE CASCADE;
