DROP TABLE IF EXISTS task_schedule_scope;
DROP TABLE IF EXISTS task_schedule;
