DROP INDEX IF EXISTS component_leak_detected;
