package app

import (
	"github.com/nicoflow/flow/firmware/baseline"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/isolation"
	"github.com/nicoflow/flow/operations/powerbudget"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/window"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	"github.com/nicoflow/flow/reconcile"
)

// adminService is Flow's own admin service (flow.admin.v1.AdminService,
// proto/flow/admin/v1/admin.proto) for operator tools, beside v1.Flow on the
// same port and behind the same interceptors. Like flowService, each
// concern's handler implements its group of methods and is embedded here;
// methods nobody implements answer CodeUnimplemented. Add a concern by
// adding its methods to admin.proto and embedding its handler.
type adminService struct {
	adminUnimplemented
	*syncHandler           // RunSync, GetSyncStatus
	*leakAdminHandler      // OverrideLeak, ListLeakOccurrences
	*inventoryAdminHandler // FindDeletedRacks
	// CreateBaseline, UpdateBaseline, GetBaseline, ListBaselines,
	// ActivateBaseline, ImportBaseline, GetCompliance, ApplyBaseline,
	// GetInstalledFirmware
	*baselineHandler
	// CreateWindow, ListWindows, GetWindow, DeleteWindow,
	// ReleaseTaskFromWindows, ReleaseRunFromWindows
	*windowHandler
	// SetPowerBudget, ListPowerBudgets, DeletePowerBudget
	*powerBudgetHandler
	*runAdminHandler // PreviewOperationRun, CreateOperationRun
	*previewHandler  // PreviewSubmission
	*approvalHandler // ListApprovals, GetApproval, Approve, Reject
	// CreateWebhook, ListWebhooks, GetWebhook, DeleteWebhook, TestWebhook,
	// ListWebhookDeliveries, RedriveWebhookDeliveries
	*webhookHandler
	// AcknowledgeIsolation, ClearIsolation, OverrideIsolation,
	// ListIsolations, ReportFacilityLeak, ListFacilityLeakReports
	*isolationHandler
}

type isolationHandler = isolation.Handler

type webhookHandler = notify.Handler

type approvalHandler = approval.Handler

type runAdminHandler = rollout.AdminHandler

type previewHandler = operations.PreviewHandler

type syncHandler = reconcile.SyncHandler

type baselineHandler = baseline.Handler

type windowHandler = window.Handler

type powerBudgetHandler = powerbudget.Handler

type leakAdminHandler = eventrule.LeakAdminHandler

type inventoryAdminHandler = inventory.AdminHandler

type adminUnimplemented struct {
	adminv1connect.UnimplementedAdminServiceHandler
}

var _ adminv1connect.AdminServiceHandler = (*adminService)(nil)
