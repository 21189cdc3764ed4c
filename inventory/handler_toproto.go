package inventory

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func uuidProto(id uuid.UUID) *flowv1.UUID { return &flowv1.UUID{Id: id.String()} }

func componentTypeToProto(t ComponentType) flowv1.ComponentType {
	switch t {
	case ComponentTypeCompute:
		return flowv1.ComponentType_COMPONENT_TYPE_COMPUTE
	case ComponentTypeNVSwitch:
		return flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH
	case ComponentTypePowerShelf:
		return flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF
	case ComponentTypeToRSwitch:
		return flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH
	case ComponentTypeUMS:
		return flowv1.ComponentType_COMPONENT_TYPE_UMS
	case ComponentTypeCDU:
		return flowv1.ComponentType_COMPONENT_TYPE_CDU
	}
	return flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN
}

// Leak status and handling on the wire (spec/api.md §4.2): a component
// leak detection has not looked at is UNKNOWN (fail closed); one no
// leak-handling task covers is NONE.
var (
	leakStatusToProto = map[LeakStatus]flowv1.LeakStatus{
		LeakUnknown:     flowv1.LeakStatus_LEAK_STATUS_UNKNOWN,
		LeakDetected:    flowv1.LeakStatus_LEAK_STATUS_DETECTED,
		LeakNotDetected: flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED,
	}
	leakHandlingToProto = map[LeakHandling]flowv1.LeakHandlingStatus{
		LeakHandlingNone:         flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE,
		LeakHandlingShuttingDown: flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_SHUTTING_DOWN,
		LeakHandlingDown:         flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_DOWN,
		LeakHandlingFailed:       flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_FAILED,
		LeakHandlingUnknown:      flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_UNKNOWN,
	}
)

func taskStatsToProto(t TaskStats) *flowv1.TaskStats {
	return &flowv1.TaskStats{WaitingTaskCount: t.Waiting, PendingTaskCount: t.Pending, RunningTaskCount: t.Running}
}

func rackToProto(r Rack) *flowv1.Rack {
	out := &flowv1.Rack{
		Info: &flowv1.DeviceInfo{
			Id:           uuidProto(r.ID),
			Name:         r.Name,
			Manufacturer: r.Manufacturer,
			Model:        r.Model,
			SerialNumber: r.SerialNumber,
			Description:  r.Description,
		},
		Location: &flowv1.Location{
			Region:     r.Location.Region,
			Datacenter: r.Location.Datacenter,
			Room:       r.Location.Room,
			Position:   r.Location.Position,
		},
		TaskStats:       taskStatsToProto(r.TaskStats),
		ExternalId:      r.ExternalID,
		OperationStatus: phaseToProto(r.OperationPhase),
	}
	if r.NVLDomainID != nil {
		out.NvlDomainIds = []*flowv1.UUID{uuidProto(*r.NVLDomainID)}
	}
	if r.NVLDomainExternalID != "" {
		out.NvlDomainExternalIds = []string{r.NVLDomainExternalID}
	}
	if r.ProfileID != "" {
		out.RackProfileId = &r.ProfileID
	}
	out.Health = healthToProto(r.Health)
	if len(r.Components) > 0 {
		out.Components = componentsToProto(r.Components)
	}
	return out
}

func componentToProto(c Component) *flowv1.Component {
	return componentsToProto([]Component{c})[0]
}

// ComponentsToProto converts components to their wire form, as
// GetComponents returns them.
func ComponentsToProto(cs []Component) []*flowv1.Component { return componentsToProto(cs) }

// componentsToProto converts cs, allocating each kind of message in one
// slab and the UUIDs' text in one buffer: a rack page holds thousands of
// components, and allocating per message and per UUID string cost about a
// third of the conversion.
func componentsToProto(cs []Component) []*flowv1.Component {
	n, nBMCs, nUUIDs := len(cs), 0, len(cs)
	for _, c := range cs {
		nBMCs += len(c.BMCs)
		if c.RackID != nil {
			nUUIDs++
		}
		if c.NVLDomainID != nil {
			nUUIDs++
		}
	}
	var (
		out     = make([]*flowv1.Component, n)
		comps   = make([]flowv1.Component, n)
		infos   = make([]flowv1.DeviceInfo, n)
		pos     = make([]flowv1.RackPosition, n)
		status  = make([]flowv1.ComponentOperationStatus, n)
		stats   = make([]flowv1.TaskStats, n)
		uuids   = make([]flowv1.UUID, nUUIDs)
		bmcs    = make([]flowv1.BMCInfo, nBMCs)
		bmcPtrs = make([]*flowv1.BMCInfo, nBMCs)
		text    uuidText
	)
	text.grow(n)
	newUUID := func(s string) *flowv1.UUID {
		u := &uuids[0]
		uuids = uuids[1:]
		u.Id = s
		return u
	}
	// Components of one rack share its ID and domain: convert those once.
	var rackID, domainID uuid.UUID
	var rackText, domainText string
	for i, c := range cs {
		o := &comps[i]
		out[i] = o
		fillComponent(o, &infos[i], &pos[i], &status[i], &stats[i], c)
		o.Info.Id = newUUID(text.string(c.ID))
		if c.RackID != nil {
			if rackText == "" || *c.RackID != rackID {
				rackID, rackText = *c.RackID, text.string(*c.RackID)
			}
			o.RackId = newUUID(rackText)
		}
		if c.NVLDomainID != nil {
			if domainText == "" || *c.NVLDomainID != domainID {
				domainID, domainText = *c.NVLDomainID, text.string(*c.NVLDomainID)
			}
			o.NvlDomainId = newUUID(domainText)
		}
		if len(c.BMCs) > 0 {
			o.Bmcs, bmcPtrs = bmcPtrs[:len(c.BMCs):len(c.BMCs)], bmcPtrs[len(c.BMCs):]
			for j, b := range c.BMCs {
				t := flowv1.BMCType_BMC_TYPE_HOST
				if b.Type == BMCTypeDPU {
					t = flowv1.BMCType_BMC_TYPE_DPU
				}
				bm := &bmcs[0]
				bmcs = bmcs[1:]
				bm.Type, bm.MacAddress, bm.IpAddress = t, string(b.MAC), b.IP
				o.Bmcs[j] = bm
			}
		}
	}
	return out
}

// fillComponent sets out's fields from c, except the UUIDs and BMCs, using
// the given messages for its parts.
func fillComponent(out *flowv1.Component, info *flowv1.DeviceInfo, pos *flowv1.RackPosition, status *flowv1.ComponentOperationStatus, stats *flowv1.TaskStats, c Component) {
	info.Name, info.Manufacturer, info.Model, info.SerialNumber, info.Description = c.Name, c.Manufacturer, c.Model, c.SerialNumber, c.Description
	pos.SlotId, pos.TrayIdx, pos.HostId = c.Position.SlotID, c.Position.TrayIdx, c.Position.HostID
	status.Phase = phaseToProto(c.Status.Phase)
	status.Reason = c.Status.Reason
	status.BlockedOperations = status.BlockedOperations[:0]
	for _, op := range c.Status.Blocked {
		status.BlockedOperations = append(status.BlockedOperations, operationTypeToProto(op))
	}
	stats.WaitingTaskCount, stats.PendingTaskCount, stats.RunningTaskCount = c.TaskStats.Waiting, c.TaskStats.Pending, c.TaskStats.Running
	out.Type = componentTypeToProto(c.Type)
	out.Info = info
	out.FirmwareVersion = c.FirmwareVersion
	out.Position = pos
	out.ComponentId = c.ExternalID
	out.PowerState = c.PowerState
	out.Status = status
	out.LeakStatus = leakStatusToProto[c.LeakStatus]
	out.TaskStats = stats
	out.RackExternalId = c.RackExternalID
	out.LeakHandlingStatus = leakHandlingToProto[c.LeakHandling]
	out.Health = healthToProto(c.Health)
	out.NvlDomainExternalId = nil
	if c.NVLDomainExternalID != "" {
		out.NvlDomainExternalId = &c.NVLDomainExternalID
	}
}

// health is a stored health report as the inventory sync writes it (JSON
// of Core's aggregate report).
type health struct {
	Source      string     `json:"source"`
	TriggeredBy *string    `json:"triggered_by"`
	ObservedAt  *time.Time `json:"observed_at"`
	Successes   []struct {
		ID     string  `json:"id"`
		Target *string `json:"target"`
	} `json:"successes"`
	Alerts []struct {
		ID              string     `json:"id"`
		Target          *string    `json:"target"`
		InAlertSince    *time.Time `json:"in_alert_since"`
		Message         string     `json:"message"`
		TenantMessage   *string    `json:"tenant_message"`
		Classifications []string   `json:"classifications"`
	} `json:"alerts"`
}

// healthToProto converts a stored report; nil (none stored, or one that
// does not decode) gives nil, so the field is absent.
func healthToProto(raw []byte) *flowv1.HealthReport {
	if len(raw) == 0 {
		return nil
	}
	var h health
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil
	}
	out := &flowv1.HealthReport{Source: h.Source, TriggeredBy: h.TriggeredBy, ObservedAt: timestampOrNil(h.ObservedAt)}
	for _, s := range h.Successes {
		out.Successes = append(out.Successes, &flowv1.HealthProbeSuccess{Id: s.ID, Target: s.Target})
	}
	for _, a := range h.Alerts {
		out.Alerts = append(out.Alerts, &flowv1.HealthProbeAlert{
			Id: a.ID, Target: a.Target, InAlertSince: timestampOrNil(a.InAlertSince), Message: a.Message,
			TenantMessage: a.TenantMessage, Classifications: a.Classifications,
		})
	}
	return out
}

func timestampOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// uuidText writes UUIDs' canonical text into one growing buffer and returns
// strings sharing it.
type uuidText struct{ b strings.Builder }

// grow makes room for n UUIDs.
func (t *uuidText) grow(n int) { t.b.Grow(36 * n) }

func (t *uuidText) string(id uuid.UUID) string {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	n := t.b.Len()
	t.b.Write(buf[:])
	// A Builder never changes bytes it has written, so earlier strings stay
	// valid if it reallocates.
	return t.b.String()[n:]
}

// RackToProto returns r as the wire Rack that CreateExpectedRack accepts,
// components included. A nil rack or component ID travels as the zero UUID,
// which CreateExpectedRack replaces with a new one.
func RackToProto(r Rack) *flowv1.Rack { return rackToProto(r) }

var phases = map[string]flowv1.Phase{
	"initializing": flowv1.Phase_PHASE_INITIALIZING, "ready": flowv1.Phase_PHASE_READY,
	"in_use": flowv1.Phase_PHASE_IN_USE, "error": flowv1.Phase_PHASE_ERROR, "deleting": flowv1.Phase_PHASE_DELETING,
}

// phaseToProto maps a stored phase; unknown values are PHASE_UNKNOWN.
func phaseToProto(p string) flowv1.Phase { return phases[p] }

// operationTypeToProto maps a blocked operation type; the wire enum knows
// only power and firmware control.
func operationTypeToProto(op string) flowv1.OperationType {
	switch op {
	case "power_control":
		return flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	case "firmware_control":
		return flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL
	}
	return flowv1.OperationType_OPERATION_TYPE_UNKNOWN
}
