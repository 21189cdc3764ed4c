DROP TABLE firmware_baseline_activation;
DROP TABLE firmware_baseline_revision;
DROP TABLE firmware_baseline;
DROP TABLE component_firmware_read;
DROP TABLE component_firmware;
