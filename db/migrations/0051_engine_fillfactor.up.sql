-- Engine rows are updated in place several times each (a step: started, job
-- recorded, batches advanced, ended; a run: once per ended step). Room left
-- on each page lets PostgreSQL keep those updates on the page (HOT), without
-- new index entries, and prune the old versions as it goes.
ALTER TABLE engine_run SET (fillfactor = 70);
ALTER TABLE engine_step SET (fillfactor = 70);
