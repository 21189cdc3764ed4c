package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler implements the operation-rule and rack-rule-association methods
// of v1.Flow. app embeds it in the one Flow handler.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
}

// NewHandler returns a Handler serving svc over pool.
func NewHandler(pool *pgxpool.Pool, svc *Service) *Handler {
	return &Handler{pool: pool, svc: svc}
}

// CreateOperationRule creates a rule and returns its ID.
func (h *Handler) CreateOperationRule(ctx context.Context, req *flowv1.CreateOperationRuleRequest) (*flowv1.CreateOperationRuleResponse, error) {
	t, err := operationTypeFromProto("operation_type", req.GetOperationType())
	if err != nil {
		return nil, err
	}
	var rule Rule
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		rule, err = h.svc.CreateRule(ctx, tx, RuleInput{
			Name: req.GetName(), Description: req.GetDescription(),
			Type: t, Code: OperationCode(req.GetOperationCode()),
			Definition: []byte(req.GetRuleDefinitionJson()), IsDefault: req.GetIsDefault(),
		})
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.CreateOperationRuleResponse{Id: &flowv1.UUID{Id: rule.ID.String()}}, nil
}

// UpdateOperationRule changes the name, description and/or definition of a
// rule; absent fields are left as they are.
func (h *Handler) UpdateOperationRule(ctx context.Context, req *flowv1.UpdateOperationRuleRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	change := RuleChange{Name: req.Name, Description: req.Description}
	if req.RuleDefinitionJson != nil {
		change.Definition = []byte(req.GetRuleDefinitionJson())
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.UpdateRule(ctx, tx, id, change)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperationRule deletes a rule that no rack is associated with.
func (h *Handler) DeleteOperationRule(ctx context.Context, req *flowv1.DeleteOperationRuleRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.svc.DeleteRule(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// GetOperationRule returns one rule.
func (h *Handler) GetOperationRule(ctx context.Context, req *flowv1.GetOperationRuleRequest) (*flowv1.OperationRule, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	rule, err := h.svc.Rule(ctx, h.pool, id)
	if err != nil {
		return nil, connectError(err)
	}
	return ruleToProto(rule)
}

// ListOperationRules lists rules, newest first, with optional type and
// default filters and offset/limit (defaults 0/100).
func (h *Handler) ListOperationRules(ctx context.Context, req *flowv1.ListOperationRulesRequest) (*flowv1.ListOperationRulesResponse, error) {
	var f RuleFilter
	if req.OperationType != nil {
		t, err := operationTypeFromProto("operation_type", req.GetOperationType())
		if err != nil {
			return nil, err
		}
		f.Type = &t
	}
	f.IsDefault = req.IsDefault
	if req.GetLimit() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limit: must be >= 0, got %d", req.GetLimit()))
	}
	f.Offset, f.Limit = int(req.GetOffset()), int(req.GetLimit())
	rules, total, err := h.svc.ListRules(ctx, h.pool, f)
	if err != nil {
		return nil, connectError(err)
	}
	res := &flowv1.ListOperationRulesResponse{TotalCount: int32(total), Rules: make([]*flowv1.OperationRule, 0, len(rules))}
	for _, r := range rules {
		pr, err := ruleToProto(r)
		if err != nil {
			return nil, err
		}
		res.Rules = append(res.Rules, pr)
	}
	return res, nil
}

// SetRuleAsDefault makes a rule the default for its type and code, clearing
// the previous default in the same transaction.
func (h *Handler) SetRuleAsDefault(ctx context.Context, req *flowv1.SetRuleAsDefaultRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.svc.SetDefaultRule(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// AssociateRuleWithRack makes a rack use a rule for the rule's type and code.
func (h *Handler) AssociateRuleWithRack(ctx context.Context, req *flowv1.AssociateRuleWithRackRequest) (*emptypb.Empty, error) {
	rackID, err := parseUUID("rack_id", req.GetRackId())
	if err != nil {
		return nil, err
	}
	ruleID, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.AssociateRule(ctx, tx, rackID, ruleID)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// DisassociateRuleFromRack removes a rack's rule association for a type and
// code.
func (h *Handler) DisassociateRuleFromRack(ctx context.Context, req *flowv1.DisassociateRuleFromRackRequest) (*emptypb.Empty, error) {
	rackID, t, err := parseAssociationKey(req.GetRackId(), req.GetOperationType())
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		return h.svc.DisassociateRule(ctx, tx, rackID, t, OperationCode(req.GetOperationCode()))
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// GetRackRuleAssociation returns the rule a rack uses for a type and code;
// rule_id is empty when the rack has no association.
func (h *Handler) GetRackRuleAssociation(ctx context.Context, req *flowv1.GetRackRuleAssociationRequest) (*flowv1.GetRackRuleAssociationResponse, error) {
	rackID, t, err := parseAssociationKey(req.GetRackId(), req.GetOperationType())
	if err != nil {
		return nil, err
	}
	a, err := h.svc.Association(ctx, h.pool, rackID, t, OperationCode(req.GetOperationCode()))
	if errors.Is(err, ErrAssociationNotFound) {
		return &flowv1.GetRackRuleAssociationResponse{}, nil
	} else if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackRuleAssociationResponse{RuleId: &flowv1.UUID{Id: a.RuleID.String()}}, nil
}

// ListRackRuleAssociations lists every rule association of a rack.
func (h *Handler) ListRackRuleAssociations(ctx context.Context, req *flowv1.ListRackRuleAssociationsRequest) (*flowv1.ListRackRuleAssociationsResponse, error) {
	rackID, err := parseUUID("rack_id", req.GetRackId())
	if err != nil {
		return nil, err
	}
	as, err := h.svc.Associations(ctx, h.pool, rackID)
	if err != nil {
		return nil, connectError(err)
	}
	res := &flowv1.ListRackRuleAssociationsResponse{Associations: make([]*flowv1.RackRuleAssociation, 0, len(as))}
	for _, a := range as {
		res.Associations = append(res.Associations, &flowv1.RackRuleAssociation{
			RackId:        &flowv1.UUID{Id: a.RackID.String()},
			OperationType: operationTypeToProto(a.Type),
			OperationCode: string(a.Code),
			RuleId:        &flowv1.UUID{Id: a.RuleID.String()},
			CreatedAt:     timestamppb.New(a.CreatedAt),
			UpdatedAt:     timestamppb.New(a.UpdatedAt),
		})
	}
	return res, nil
}

func parseAssociationKey(rack *flowv1.UUID, t flowv1.OperationType) (uuid.UUID, OperationType, error) {
	rackID, err := parseUUID("rack_id", rack)
	if err != nil {
		return uuid.Nil, "", err
	}
	ot, err := operationTypeFromProto("operation_type", t)
	if err != nil {
		return uuid.Nil, "", err
	}
	return rackID, ot, nil
}

// parseUUID reads a required UUID field, answering InvalidArgument that names
// the field.
func parseUUID(field string, u *flowv1.UUID) (uuid.UUID, error) {
	if u.GetId() == "" {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is required", field))
	}
	id, err := uuid.Parse(u.GetId())
	if err != nil {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: invalid UUID %q", field, u.GetId()))
	}
	return id, nil
}

// operationTypeFromProto maps the wire enum, which has only the two types
// users may write rules for.
func operationTypeFromProto(field string, t flowv1.OperationType) (OperationType, error) {
	switch t {
	case flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL:
		return OperationTypePowerControl, nil
	case flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL:
		return OperationTypeFirmwareControl, nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%s: must be OPERATION_TYPE_POWER_CONTROL or OPERATION_TYPE_FIRMWARE_CONTROL, got %v", field, t))
}

// operationTypeToProto maps a type to the wire enum; types the enum lacks
// (bring_up, decommission, inject_expectation) become UNKNOWN.
func operationTypeToProto(t OperationType) flowv1.OperationType {
	switch t {
	case OperationTypePowerControl:
		return flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	case OperationTypeFirmwareControl:
		return flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL
	}
	return flowv1.OperationType_OPERATION_TYPE_UNKNOWN
}

func ruleToProto(r Rule) (*flowv1.OperationRule, error) {
	def, err := json.Marshal(r.Definition)
	if err != nil {
		return nil, fmt.Errorf("encode rule %s definition: %w", r.ID, err)
	}
	return &flowv1.OperationRule{
		Id:                 &flowv1.UUID{Id: r.ID.String()},
		Name:               r.Name,
		Description:        r.Description,
		OperationType:      operationTypeToProto(r.Type),
		OperationCode:      string(r.Code),
		RuleDefinitionJson: string(def),
		IsDefault:          r.IsDefault,
		CreatedAt:          timestamppb.New(r.CreatedAt),
		UpdatedAt:          timestamppb.New(r.UpdatedAt),
	}, nil
}

// connectError maps the package's sentinel errors to Connect codes; anything
// else passes through for app's interceptor to log and hide.
func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidRule), errors.Is(err, ErrRuleMismatch):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRuleNotFound), errors.Is(err, ErrRackNotFound), errors.Is(err, ErrAssociationNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrDefaultRuleExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrRuleInUse):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}
