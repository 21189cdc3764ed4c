-- No statistics for the wide columns of the engine's and the tasks' tables
-- that no statement filters, joins or sorts by (frozen specs, cursors,
-- reports, payloads): ANALYZE then skips them. Flow analyzes a table a
-- burst doubled within seconds (db.AnalyzeResized, docs/operations.md
-- "Statistics after a burst"), and at 18,000 steps ANALYZE of engine_step
-- spent 345 ms on them; the plans need the keys, states and times only.
ALTER TABLE engine_step
    ALTER COLUMN spec SET STATISTICS 0,
    ALTER COLUMN checkpoint SET STATISTICS 0,
    ALTER COLUMN progress SET STATISTICS 0,
    ALTER COLUMN unknown_outcomes SET STATISTICS 0,
    ALTER COLUMN error SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0,
    ALTER COLUMN batch_attempts SET STATISTICS 0;
ALTER TABLE engine_run
    ALTER COLUMN metadata SET STATISTICS 0,
    ALTER COLUMN error SET STATISTICS 0,
    ALTER COLUMN first_failure SET STATISTICS 0;
ALTER TABLE task
    ALTER COLUMN information SET STATISTICS 0,
    ALTER COLUMN components SET STATISTICS 0,
    ALTER COLUMN targets SET STATISTICS 0,
    ALTER COLUMN rule SET STATISTICS 0,
    ALTER COLUMN report SET STATISTICS 0,
    ALTER COLUMN message SET STATISTICS 0,
    ALTER COLUMN description SET STATISTICS 0;
