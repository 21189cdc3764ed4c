DROP TABLE prune_stat;
DROP INDEX event_last_observed;
DROP INDEX operation_run_finished_at;
DROP INDEX task_active_created;
DROP INDEX task_finished_at;
