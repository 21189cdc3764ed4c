-- Power budgets per feed (issue 45, docs/operations.md "Feeds, loops and
-- power budgets"). Feeds are the racks power_feed values.

-- name: BudgetUpsert :one
INSERT INTO power_budget (feed, max_transitions, max_kw, updated_by)
VALUES (@feed, @max_transitions, sqlc.narg(max_kw), @updated_by)
ON CONFLICT (feed) DO UPDATE SET max_transitions = excluded.max_transitions, max_kw = excluded.max_kw,
    updated_by = excluded.updated_by, updated_at = now()
RETURNING *;

-- name: BudgetDelete :one
DELETE FROM power_budget WHERE feed = @feed RETURNING *;

-- name: BudgetList :many
SELECT * FROM power_budget ORDER BY feed;

-- name: FeedKnown :one
SELECT (EXISTS (SELECT 1 FROM rack WHERE power_feed = @feed::text AND deleted_at IS NULL)
    OR EXISTS (SELECT 1 FROM power_budget WHERE feed = @feed::text))::bool AS known;

-- name: FeedList :many
-- Every feed a live rack is on, with its racks and halls.
SELECT power_feed::text AS feed, count(*)::bigint AS racks,
    coalesce(array_agg(DISTINCT location_room) FILTER (WHERE location_room <> ''), '{}')::text[] AS halls
FROM rack WHERE deleted_at IS NULL AND power_feed IS NOT NULL
GROUP BY power_feed ORDER BY power_feed;
