DROP INDEX IF EXISTS task_trigger;
DROP TABLE IF EXISTS component_leak;
DROP TABLE IF EXISTS leak_occurrence;
DROP TABLE IF EXISTS event_action_execution;
DROP TABLE IF EXISTS event;
DROP TABLE IF EXISTS event_rule_binding;
DROP TABLE IF EXISTS event_rule;
