package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// Role is what an identity may do (docs/security.md): each role includes
// the ones below it.
type Role int

// Roles, weakest first. roleAny is what health checks need: a verified
// certificate, whatever the policy says about it.
const (
	roleNone Role = iota // no role: the identity may call nothing but health
	roleViewer
	roleOperator
	roleAdmin
	roleAny Role = -1
	// roleBMS is the building management system's role, outside the
	// ladder: it may report facility leaks and read its own reports
	// (bmsMethods), nothing else; an admin may do what it may.
	roleBMS Role = -2
)

// bmsMethods are the procedures role bms may call.
var bmsMethods = map[string]bool{
	adminv1connect.AdminServiceReportFacilityLeakProcedure:      true,
	adminv1connect.AdminServiceListFacilityLeakReportsProcedure: true,
}

func (r Role) String() string {
	switch r {
	case roleViewer:
		return "viewer"
	case roleOperator:
		return "operator"
	case roleAdmin:
		return "admin"
	case roleAny:
		return "any"
	case roleBMS:
		return "bms"
	}
	return "none"
}

func parseRole(s string) (Role, bool) {
	for _, r := range []Role{roleViewer, roleOperator, roleAdmin, roleBMS} {
		if r.String() == s {
			return r, true
		}
	}
	return roleNone, false
}

// methodRoles is the one method → role table: the role each v1.Flow method
// needs. viewer: every read; operator: power, firmware, bring-up, ingest,
// task cancel, schedules and operation runs (rollouts); admin: inventory
// writes, operation rules and their rack associations, event rules,
// decommission. A test fails when a v1.Flow method is missing here; any
// other procedure (reflection and health aside) needs admin.
var methodRoles = map[string]Role{
	flowv1connect.FlowVersionProcedure: roleViewer,

	// Task schedules: operator.
	flowv1connect.FlowCreateTaskScheduleProcedure:      roleOperator,
	flowv1connect.FlowGetTaskScheduleProcedure:         roleViewer,
	flowv1connect.FlowListTaskSchedulesProcedure:       roleViewer,
	flowv1connect.FlowUpdateTaskScheduleProcedure:      roleOperator,
	flowv1connect.FlowPauseTaskScheduleProcedure:       roleOperator,
	flowv1connect.FlowResumeTaskScheduleProcedure:      roleOperator,
	flowv1connect.FlowDeleteTaskScheduleProcedure:      roleOperator,
	flowv1connect.FlowTriggerTaskScheduleProcedure:     roleOperator,
	flowv1connect.FlowAddTaskScheduleScopeProcedure:    roleOperator,
	flowv1connect.FlowRemoveTaskScheduleScopeProcedure: roleOperator,
	flowv1connect.FlowUpdateTaskScheduleScopeProcedure: roleOperator,
	flowv1connect.FlowListTaskScheduleScopesProcedure:  roleViewer,
	flowv1connect.FlowCheckScheduleConflictsProcedure:  roleViewer,

	// Racks: inventory writes are admin.
	flowv1connect.FlowCreateExpectedRackProcedure:  roleAdmin,
	flowv1connect.FlowGetRackInfoByIDProcedure:     roleViewer,
	flowv1connect.FlowGetRackInfoBySerialProcedure: roleViewer,
	flowv1connect.FlowGetListOfRacksProcedure:      roleViewer,
	flowv1connect.FlowPatchRackProcedure:           roleAdmin,
	flowv1connect.FlowDeleteRackProcedure:          roleAdmin,
	flowv1connect.FlowPurgeRackProcedure:           roleAdmin,

	// Rack operations: operator, but decommission is admin.
	flowv1connect.FlowUpgradeFirmwareProcedure:    roleOperator,
	flowv1connect.FlowBringUpRackProcedure:        roleOperator,
	flowv1connect.FlowIngestRackProcedure:         roleOperator,
	flowv1connect.FlowDecommissionRackProcedure:   roleAdmin,
	flowv1connect.FlowPowerOnRackProcedure:        roleOperator,
	flowv1connect.FlowPowerOffRackProcedure:       roleOperator,
	flowv1connect.FlowPowerResetRackProcedure:     roleOperator,
	flowv1connect.FlowACPowerCycleRackProcedure:   roleOperator,
	flowv1connect.FlowValidateComponentsProcedure: roleViewer, // compares, writes nothing

	// Components and NVLink domains: inventory writes are admin.
	flowv1connect.FlowGetComponentInfoByIDProcedure:     roleViewer,
	flowv1connect.FlowGetComponentInfoBySerialProcedure: roleViewer,
	flowv1connect.FlowGetComponentsProcedure:            roleViewer,
	flowv1connect.FlowAddComponentProcedure:             roleAdmin,
	flowv1connect.FlowPatchComponentProcedure:           roleAdmin,
	flowv1connect.FlowDeleteComponentProcedure:          roleAdmin,
	flowv1connect.FlowPurgeComponentProcedure:           roleAdmin,
	flowv1connect.FlowCreateNVLDomainProcedure:          roleAdmin,
	flowv1connect.FlowAttachRacksToNVLDomainProcedure:   roleAdmin,
	flowv1connect.FlowDetachRacksFromNVLDomainProcedure: roleAdmin,
	flowv1connect.FlowGetListOfNVLDomainsProcedure:      roleViewer,
	flowv1connect.FlowGetRacksForNVLDomainProcedure:     roleViewer,
	flowv1connect.FlowGetNVLinkDomainProcedure:          roleViewer,
	flowv1connect.FlowGetListOfNVLinkDomainsProcedure:   roleViewer,

	// Tasks: cancel is operator.
	flowv1connect.FlowListTasksProcedure:     roleViewer,
	flowv1connect.FlowGetTasksByIDsProcedure: roleViewer,
	flowv1connect.FlowCancelTaskProcedure:    roleOperator,

	// Operation rules and rack associations: admin.
	flowv1connect.FlowCreateOperationRuleProcedure:      roleAdmin,
	flowv1connect.FlowUpdateOperationRuleProcedure:      roleAdmin,
	flowv1connect.FlowDeleteOperationRuleProcedure:      roleAdmin,
	flowv1connect.FlowGetOperationRuleProcedure:         roleViewer,
	flowv1connect.FlowListOperationRulesProcedure:       roleViewer,
	flowv1connect.FlowSetRuleAsDefaultProcedure:         roleAdmin,
	flowv1connect.FlowAssociateRuleWithRackProcedure:    roleAdmin,
	flowv1connect.FlowDisassociateRuleFromRackProcedure: roleAdmin,
	flowv1connect.FlowGetRackRuleAssociationProcedure:   roleViewer,
	flowv1connect.FlowListRackRuleAssociationsProcedure: roleViewer,

	// Event rules and bindings: admin.
	flowv1connect.FlowCreateEventRuleProcedure:        roleAdmin,
	flowv1connect.FlowGetEventRuleProcedure:           roleViewer,
	flowv1connect.FlowGetEffectiveEventRuleProcedure:  roleViewer,
	flowv1connect.FlowListEventRulesProcedure:         roleViewer,
	flowv1connect.FlowUpdateEventRuleProcedure:        roleAdmin,
	flowv1connect.FlowEnableEventRuleProcedure:        roleAdmin,
	flowv1connect.FlowDisableEventRuleProcedure:       roleAdmin,
	flowv1connect.FlowDeleteEventRuleProcedure:        roleAdmin,
	flowv1connect.FlowCreateEventRuleBindingProcedure: roleAdmin,
	flowv1connect.FlowGetEventRuleBindingProcedure:    roleViewer,
	flowv1connect.FlowDeleteEventRuleBindingProcedure: roleAdmin,

	// Operation runs (phased rollouts): operator.
	flowv1connect.FlowCreateOperationRunProcedure:       roleOperator,
	flowv1connect.FlowGetOperationRunProcedure:          roleViewer,
	flowv1connect.FlowListOperationRunsProcedure:        roleViewer,
	flowv1connect.FlowListOperationRunTargetsProcedure:  roleViewer,
	flowv1connect.FlowPauseOperationRunProcedure:        roleOperator,
	flowv1connect.FlowResumeOperationRunProcedure:       roleOperator,
	flowv1connect.FlowAdvanceOperationRunPhaseProcedure: roleOperator,
	flowv1connect.FlowCancelOperationRunProcedure:       roleOperator,

	// Flow's admin service (flow.admin.v1.AdminService): a sync cycle now
	// is operator (it only makes the inventory follow Core), its status is
	// viewer.
	adminv1connect.AdminServiceRunSyncProcedure:       roleOperator,
	adminv1connect.AdminServiceGetSyncStatusProcedure: roleViewer,
	// Leaks: overriding a leaking component's energise guard is admin
	// (audited); the occurrences are viewer.
	adminv1connect.AdminServiceOverrideLeakProcedure:        roleAdmin,
	adminv1connect.AdminServiceListLeakOccurrencesProcedure: roleViewer,
	// Leak tiers (docs/operations.md "Rack isolation"): acknowledging a
	// facility request and clearing an isolation are operator (audited,
	// with the reason); overriding the power-on refusal is admin; a BMS
	// leak report is the bms role's (or an admin's); the lists are viewer
	// (and the bms role's own reports).
	adminv1connect.AdminServiceAcknowledgeIsolationProcedure:    roleOperator,
	adminv1connect.AdminServiceClearIsolationProcedure:          roleOperator,
	adminv1connect.AdminServiceOverrideIsolationProcedure:       roleAdmin,
	adminv1connect.AdminServiceListIsolationsProcedure:          roleViewer,
	adminv1connect.AdminServiceReportFacilityLeakProcedure:      roleBMS,
	adminv1connect.AdminServiceListFacilityLeakReportsProcedure: roleViewer,
	// Firmware baselines: writing or activating a baseline and applying it
	// (which starts firmware upgrades) are operator; reads are viewer.
	adminv1connect.AdminServiceCreateBaselineProcedure:       roleOperator,
	adminv1connect.AdminServiceUpdateBaselineProcedure:       roleOperator,
	adminv1connect.AdminServiceActivateBaselineProcedure:     roleOperator,
	adminv1connect.AdminServiceImportBaselineProcedure:       roleOperator,
	adminv1connect.AdminServiceApplyBaselineProcedure:        roleOperator,
	adminv1connect.AdminServiceGetBaselineProcedure:          roleViewer,
	adminv1connect.AdminServiceListBaselinesProcedure:        roleViewer,
	adminv1connect.AdminServiceGetComplianceProcedure:        roleViewer,
	adminv1connect.AdminServiceGetInstalledFirmwareProcedure: roleViewer,
	// Inventory: finding deleted racks by name is a read (viewer); purging
	// one stays admin (PurgeRack).
	adminv1connect.AdminServiceFindDeletedRacksProcedure: roleViewer,
	// Feeds, loops and power budgets (docs/operations.md): writing them
	// is admin, as PatchRack; reading budgets is viewer.
	adminv1connect.AdminServiceSetRackPlacementProcedure:  roleAdmin,
	adminv1connect.AdminServiceSetPowerBudgetProcedure:    roleAdmin,
	adminv1connect.AdminServiceDeletePowerBudgetProcedure: roleAdmin,
	adminv1connect.AdminServiceListPowerBudgetsProcedure:  roleViewer,
	// Maintenance windows and freezes (docs/change-safety.md): writing
	// them and releasing a held task or run are admin (audited, with the
	// reason); reads are viewer.
	adminv1connect.AdminServiceCreateWindowProcedure:           roleAdmin,
	adminv1connect.AdminServiceDeleteWindowProcedure:           roleAdmin,
	adminv1connect.AdminServiceReleaseTaskFromWindowsProcedure: roleAdmin,
	adminv1connect.AdminServiceReleaseRunFromWindowsProcedure:  roleAdmin,
	adminv1connect.AdminServiceListWindowsProcedure:            roleViewer,
	adminv1connect.AdminServiceGetWindowProcedure:              roleViewer,
	// Change safety (docs/change-safety.md): previews read (viewer), a run
	// is an operator's, and a second operator or admin approves.
	adminv1connect.AdminServicePreviewOperationRunProcedure: roleViewer,
	adminv1connect.AdminServicePreviewSubmissionProcedure:   roleViewer,
	adminv1connect.AdminServiceCreateOperationRunProcedure:  roleOperator,
	adminv1connect.AdminServiceListApprovalsProcedure:       roleViewer,
	adminv1connect.AdminServiceGetApprovalProcedure:         roleViewer,
	adminv1connect.AdminServiceApproveProcedure:             roleOperator,
	adminv1connect.AdminServiceRejectProcedure:              roleOperator,
	// Webhooks (docs/notifications.md): subscriptions, test sends and
	// redrives are operator (audited; the secret is never in the audit
	// line); subscriptions and deliveries are viewer.
	adminv1connect.AdminServiceCreateWebhookProcedure:            roleOperator,
	adminv1connect.AdminServiceDeleteWebhookProcedure:            roleOperator,
	adminv1connect.AdminServiceTestWebhookProcedure:              roleOperator,
	adminv1connect.AdminServiceRedriveWebhookDeliveriesProcedure: roleOperator,
	adminv1connect.AdminServiceListWebhooksProcedure:             roleViewer,
	adminv1connect.AdminServiceGetWebhookProcedure:               roleViewer,
	adminv1connect.AdminServiceListWebhookDeliveriesProcedure:    roleViewer,
}

// procedureRole returns the role procedure needs: methodRoles for v1.Flow,
// any verified client for gRPC health, viewer for server reflection (dev
// mode only), and admin for anything else, so a new service is closed until
// it is listed.
func procedureRole(procedure string) Role {
	if r, ok := methodRoles[procedure]; ok {
		return r
	}
	switch {
	case strings.HasPrefix(procedure, "/grpc.health.v1.Health/"):
		return roleAny
	case strings.HasPrefix(procedure, "/grpc.reflection."):
		return roleViewer
	}
	return roleAdmin
}

// Policy maps identities to roles (FLOW_AUTHZ_POLICY). A nil Policy makes
// every identity admin.
type Policy struct {
	exact    map[string]Role
	prefixes []policyPrefix // longest first
	// audit lets a call the policy would refuse through, logging it
	// (upstream's audit mode, AllowlistPolicy).
	audit bool
}

type policyPrefix struct {
	prefix string // "" matches every identity ("*")
	role   Role
}

// policyFile is the YAML shape of a policy:
//
//	identities:
//	  spiffe://example.org/ns/platform/sa/flow-admin: admin
//	  spiffe://example.org/ns/ops/*: operator
//	  dashboard: viewer
type policyFile struct {
	Identities map[string]string `yaml:"identities"`
}

// LoadPolicy reads the policy at path; "" is no policy (nil). Errors name
// the file and the bad entry.
func LoadPolicy(path string) (*Policy, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("FLOW_AUTHZ_POLICY: %w", err)
	}
	p, err := parsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("FLOW_AUTHZ_POLICY %s: %w", path, err)
	}
	return p, nil
}

func parsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if len(f.Identities) == 0 {
		return nil, errors.New("identities: no identity listed (an empty policy would deny every call; unset FLOW_AUTHZ_POLICY to make every client admin)")
	}
	p := &Policy{exact: map[string]Role{}}
	for id, name := range f.Identities {
		role, ok := parseRole(name)
		if !ok {
			return nil, fmt.Errorf("identities: %q: unknown role %q (want viewer, operator, admin or bms)", id, name)
		}
		switch i := strings.IndexByte(id, '*'); {
		case id == "":
			return nil, errors.New("identities: empty identity")
		case i < 0:
			p.exact[id] = role
		case id == "*":
			p.prefixes = append(p.prefixes, policyPrefix{"", role})
		case i == len(id)-1 && strings.HasSuffix(id, "/*"):
			p.prefixes = append(p.prefixes, policyPrefix{strings.TrimSuffix(id, "*"), role})
		default:
			return nil, fmt.Errorf("identities: %q: a wildcard may only end a pattern, after a slash (spiffe://domain/ns/*) or stand alone (*)", id)
		}
	}
	sort.Slice(p.prefixes, func(i, j int) bool { return len(p.prefixes[i].prefix) > len(p.prefixes[j].prefix) })
	return p, nil
}

// roleOf returns identity's role: an exact entry, else the longest matching
// pattern, else roleNone.
func (p *Policy) roleOf(identity string) Role {
	if p == nil {
		return roleAdmin
	}
	if r, ok := p.exact[identity]; ok {
		return r
	}
	for _, pp := range p.prefixes {
		if strings.HasPrefix(identity, pp.prefix) {
			return pp.role
		}
	}
	return roleNone
}

// authorizer is the connect interceptor that enforces the policy: a call
// whose identity lacks the procedure's role ends PermissionDenied before
// its handler runs, so nothing is written.
type authorizer struct {
	policy *Policy
	logger *slog.Logger // audit-mode warnings
}

func (a authorizer) check(ctx context.Context, procedure string) error {
	identity := caller.Identity(ctx)
	need := procedureRole(procedure)
	if identity == "" {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: the client certificate names no identity (no spiffe:// URI SAN, no subject CN)", procedure))
	}
	if need == roleAny {
		return nil
	}
	have := a.policy.roleOf(identity)
	var refused bool
	switch {
	case have == roleBMS:
		refused = !bmsMethods[procedure]
	case need == roleBMS:
		refused = have != roleAdmin
	default:
		refused = have < need
	}
	if refused {
		if a.policy.audit {
			a.logger.WarnContext(ctx, "authorization audit: the caller is not on the allowlist; FLOW_AUTHORIZATION_MODE=enforce would refuse this call",
				"procedure", procedure, "identity", identity)
			return nil
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s needs role %s; identity %q has role %s", procedure, need, identity, have))
	}
	return nil
}

func (a authorizer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(ctx, req.Spec().Procedure); err != nil {
			return nil, err
		}
		if a.policy != nil {
			ctx = caller.WithRole(ctx, a.policy.roleOf(caller.Identity(ctx)).String())
		}
		return next(ctx, req)
	}
}

func (a authorizer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authorizer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(ctx, conn.Spec().Procedure); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// withCaller puts the caller's identity and a request ID in each request's
// context: the verified client certificate's SPIFFE ID or CN under TLS,
// caller.Insecure on a cleartext server. The request ID is the client's
// X-Request-Id when it sent a sane one, else a new UUID, and is echoed in
// the response's X-Request-Id.
func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		identity, ok := r.Context().Value(inProcessKey{}).(string)
		if !ok {
			identity = RequestIdentity(r)
		}
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-Id", id)
		ctx := caller.WithRequestID(caller.WithIdentity(r.Context(), identity), id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// RequestIDOf returns the request ID the API would give r: the client's
// X-Request-Id when it sent a sane one, else a new UUID (for a handler
// outside the API's chain that logs, as the console's River UI wrapper).
func RequestIDOf(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); validRequestID(id) {
		return id
	}
	return uuid.NewString()
}

// validRequestID reports whether a client's request ID may be logged as is:
// 1 to 128 printable ASCII characters without spaces or quotes.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// RequestIdentity is the identity of r's client as the API sees it: the
// verified client certificate's SPIFFE ID or CN under TLS ("" for a
// certificate that names nobody, or none), caller.Insecure on a cleartext
// server.
func RequestIdentity(r *http.Request) string {
	if r.TLS == nil {
		return caller.Insecure
	}
	if len(r.TLS.PeerCertificates) > 0 {
		return certIdentity(r.TLS.PeerCertificates[0])
	}
	return ""
}

type inProcessKey struct{}

// WithInProcessCaller returns ctx marked so that a request made with it to
// NewHandler's handler, in process (the console calling the API for its
// user), is the call of identity: authorized, logged and audited as that
// identity's. Only code in the server can set it; nothing a client sends
// can.
func WithInProcessCaller(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, inProcessKey{}, identity)
}

// RoleName is the role identity has under p, as the API enforces it:
// "viewer", "operator", "admin", or "none". In audit mode (upstream's
// allowlist, FLOW_AUTHORIZATION_MODE=audit) every call is let through, so
// every identity is effectively admin.
func (p *Policy) RoleName(identity string) string {
	if identity == "" {
		return roleNone.String()
	}
	if p != nil && p.audit {
		return roleAdmin.String()
	}
	return p.roleOf(identity).String()
}
