DROP TABLE engine_wait;
DROP TABLE engine_hold;
DROP TABLE engine_resource;
