// Package reconcile answers ValidateComponents: it compares the components
// Flow's inventory expects with those the component managers (NICo Core,
// PSM) report, and returns missing, unexpected and mismatch diffs with
// summary counts (spec/api.md §5.7).
//
// Service holds the rules: which expected components and which reported
// devices are in scope, and how inventory records become backend.Expected.
// The comparison itself is backend.Validate. Handler serves the method over
// Connect; app embeds it in the one v1.Flow handler.
package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/inventory"
)

// ErrNotConfigured: Flow has no component managers at all. Backend errors
// keep their own classes (backend.ErrNotConfigured, backend.ErrUnreachable…).
var ErrNotConfigured = errors.New("no component managers configured")

// DeviceSource lists the devices the component managers know; satisfied by
// *backend.Managers.
type DeviceSource interface {
	Inventory(ctx context.Context) ([]backend.Actual, error)
}

// Query is what to validate and how to order and page the diff list.
type Query struct {
	// Selection scopes the expected components (Scope, Types, Name,
	// Manufacturer, Model as in inventory.ListComponents); its Order and Page
	// are ignored. The zero value selects everything.
	Selection inventory.ComponentQuery
	// OrderByType sorts the diffs by component type, then name; otherwise
	// by name.
	OrderByType bool
	Descending  bool
	// Offset and Limit page the diff list; Limit 0 means no limit.
	Offset, Limit int
	// Live asks the component managers now instead of reading the drift
	// the last inventory sync persisted.
	Live bool
}

// Diff is one discrepancy, with Flow's record of the component when Flow
// has one (missing and mismatch).
type Diff struct {
	backend.Diff
	Component *inventory.Component
}

// Report is one page of diffs and the counts over every diff in scope.
type Report struct {
	Diffs                                       []Diff
	Total, Missing, Unexpected, Mismatch, Match int
	// CheckedAt is when the inventory sync the report comes from started;
	// nil for a live check.
	CheckedAt *time.Time
}
