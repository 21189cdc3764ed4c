DROP TABLE IF EXISTS operation_run_target;
DROP TABLE IF EXISTS operation_run;
