-- When a step's first execution began (its job fetched and the step
-- claimed): started_at is when its stage made it runnable, so the two
-- tell how long it waited for a worker (docs/bench.md "Where a leak's
-- response time goes"). Never cleared, unlike claimed_at.
ALTER TABLE engine_step ADD COLUMN first_claimed_at timestamptz;
