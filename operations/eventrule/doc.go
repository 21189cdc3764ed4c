// Package eventrule holds event rules and leak detection
// (spec/orchestration.md §4 and §5.2, docs/event-rules.md): how Flow answers
// an event such as a coolant leak.
//
// It owns the rule vocabulary and contract (eventrule.go), the store of
// rules and bindings and the effective-rule selection (service.go), the
// processing pipeline that turns an event envelope into one stored event and
// its action executions (pipeline.go), the executions, run as River jobs of
// kind "operations.event_rule_execution" on the "event_rule" queue
// (exec.go), leak detection (leak.go), and the event-rule methods of v1.Flow
// (handler.go).
//
// Its own tables (db/migrations/0110_event_rules.up.sql) are event_rule,
// event_rule_binding, event, event_action_execution and leak_occurrence;
// its queries (query.sql, generated into internal/dbsqlc) touch no other.
// A component's leak status (component_leak) is the inventory's, written
// through inventory.Service.SetLeakStatus.
//
// It may import db, caller, inventory and operations. It reaches the task
// manager only through operations' exported API: Tasks.Preempt and
// Tasks.Submit (Request.Preempt, Payload.Leak) for a leak response,
// Tasks.Submit for the tasks an execution or the legacy leak path submits, Tasks.TriggeredTasks for
// the tasks behind a component's leak-handling status, and the operation
// vocabulary (OperationType, OperationCode, PayloadOperation). operations
// imports nothing of this package; app wires the two together.
package eventrule
