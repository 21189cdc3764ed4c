// Package schedule keeps task schedules and fires them (spec/orchestration.md
// §1, docs/schedules.md): an operation without targets (the template), when
// it fires (interval, cron in a timezone, or one time), its overlap policy,
// and its scope, one entry per rack with an optional component filter.
// Every firing submits one task per eligible scope entry through the task
// manager, in the firing's own transaction.
//
// It owns:
//   - the tables task_schedule and task_schedule_scope (db/migrations
//     0060_task_schedules and 0091_task_schedule_created_by), queried only
//     here (query.sql, internal/dbsqlc);
//   - Service: the schedules' rules (create, update, pause, resume, delete,
//     scopes, conflicts) and their firing (Fire, Trigger, RescueOverdue);
//   - Handler: the 13 task-schedule methods of v1.Flow, which app embeds in
//     the one Flow handler;
//   - Worker and FireArgs: the River job (kind operations.schedule_fire, on
//     Queue "schedule") that fires a schedule at its time, and
//     PromoteDueFirings, the leader's tick that makes due firings runnable.
//
// It may import db, caller, inventory, firmware and operations
// (app/imports_test.go). It reaches the task manager only through
// operations' exported API: Tasks.Submit for a firing's tasks,
// Tasks.Statuses for the overlap policy, and the request checks, payload
// numbering, credential conversion and error mapping that direct
// submissions share (operations/api_schedule.go). The task manager
// imports nothing of schedule; a schedule's tasks carry trigger type
// TriggerType and the schedule's ID.
package schedule
