-- Calls whose outcome is unknown (docs/engine.md, "Outcomes kept through a
-- database blip"). claimed_at is set while an execution is between its
-- claim and recording its call's outcome; a new execution (or a sweep) that
-- finds it still set knows the previous call may have reached the backend
-- and its answer was never recorded. Each such case is appended here, so a
-- task report can say which calls may have been sent twice.
ALTER TABLE engine_step
    ADD COLUMN unknown_outcomes jsonb NOT NULL DEFAULT '[]';
