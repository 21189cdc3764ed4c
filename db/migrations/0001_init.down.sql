DROP TABLE IF EXISTS flow_instance;
