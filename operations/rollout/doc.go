// Package rollout runs operation runs (rollouts, spec/orchestration.md §2,
// docs/rollouts.md): phased, gated firmware upgrades over a planned, frozen
// set of rack targets, each target becoming one child task of the task
// manager.
//
// It owns:
//   - the tables operation_run and operation_run_target (migrations
//     0080_operation_runs and 0092_operation_run_created_by), queried only
//     through query.sql and internal/dbsqlc;
//   - planning (selection, ordering, phases: plan.go), the run state machine
//     (run.go), its service (service.go) and the eight operation-run methods
//     of v1.Flow (handler.go);
//   - the wake-up job (kind "operations.operation_run_wake") that ends a
//     conflict backoff or a retry timeout (worker.go).
//
// It reaches the task manager only through package operations' exported
// API: Tasks.Submit to write a target's child task in the claiming
// transaction, Tasks.Cancel for a cancelled run's children, and the
// end-of-task hook (register Service.TasksEnded with Tasks.OnTaskEnd), which
// advances a run inside its child task's last checkpoint transaction. Its
// queries still read two columns of other packages' tables by join: a child
// task's status and message (task) and a rack's external ID (rack).
//
// It may import db, caller, engine, inventory, firmware and operations;
// operations imports nothing of it, and app wires it.
package rollout
