package nicosim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	"github.com/nicoflow/flow/proto/gen/forge/forgepbconnect"
	"github.com/nicoflow/flow/sim"
)

type handler struct {
	forgepbconnect.UnimplementedForgeHandler
	s *Sim
}

// begin applies call-level faults; end journals the call with its outcome.
func (h *handler) begin(ctx context.Context, method string, devices []string) error {
	return h.s.faults.Gate(ctx, method, devices)
}

func (h *handler) end(method string, devices []string, err *error) {
	h.endAction(method, "", devices, err)
}

// endListing is end for a listing filtered by a health alert ("" for
// none), which the journal records (leak detection's polls).
func (h *handler) endListing(method, alert string, err *error) {
	code := "ok"
	if *err != nil {
		code = connect.CodeOf(*err).String()
	}
	h.s.journal.Record(sim.Call{Time: h.s.clock.Now(), Method: method, Code: code, Filter: alert})
}

// endAction is end for a call that asked for action (a power control).
func (h *handler) endAction(method, action string, devices []string, err *error) {
	code := "ok"
	if *err != nil {
		code = connect.CodeOf(*err).String()
	}
	h.s.journal.Record(sim.Call{Time: h.s.clock.Now(), Method: method, Devices: devices, Code: code, Action: action})
}

// take finds a fault of kind for method that names d (by key, ID or MAC) or
// no device, and no sub-component.
func (h *handler) take(kind sim.FaultKind, method, key string, d *device) (sim.Fault, bool) {
	return h.takeJob(kind, method, key, d, "")
}

// takeJob is take for d's firmware job of sub-component c: it also finds
// the faults that name c.
func (h *handler) takeJob(kind sim.FaultKind, method, key string, d *device, c string) (sim.Fault, bool) {
	if f, ok := h.s.faults.TakeComponent(kind, method, key, c); ok || d == nil {
		return f, ok
	}
	if f, ok := h.s.faults.TakeComponent(kind, method, d.ID, c); ok {
		return f, true
	}
	return h.s.faults.TakeComponent(kind, method, d.BMCMAC, c)
}

var itemStatus = map[string]forgepb.ComponentManagerStatusCode{
	"invalid_argument": forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_INVALID_ARGUMENT,
	"internal_error":   forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_INTERNAL_ERROR,
	"not_found":        forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_NOT_FOUND,
	"already_exists":   forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_ALREADY_EXISTS,
	"unavailable":      forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_UNAVAILABLE,
}

// target is a resolved oneof target: the kind, the identifiers as sent and
// whether they are MACs.
type target struct {
	kind  string
	keys  []string
	isMAC bool
}

func (t target) result(key string, d *device) *forgepb.ComponentResult {
	r := &forgepb.ComponentResult{}
	if t.isMAC {
		r.MacAddress = &key
		if d != nil && d.gateOpen {
			id := d.ID
			r.ComponentId = &id
		}
	} else {
		r.ComponentId = &key
	}
	return r
}

func idsOf[T interface{ GetId() string }](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.GetId()
	}
	return out
}

// lookup resolves one key of t. Unknown devices return nil.
func (s *Sim) lookup(t target, key string) *device {
	var d *device
	if t.isMAC {
		d = s.byMAC(key)
	} else {
		d = s.byID(t.kind, key)
	}
	if d == nil || d.Kind != t.kind {
		return nil
	}
	return d
}

func errInvalid(msg string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
}

func (h *handler) Version(ctx context.Context, req *forgepb.VersionRequest) (res *forgepb.BuildInfo, err error) {
	defer h.end("Version", nil, &err)
	if err := h.begin(ctx, "Version", nil); err != nil {
		return nil, err
	}
	res = &forgepb.BuildInfo{BuildVersion: h.s.opts.BuildVersion}
	if req.GetDisplayConfig() {
		res.RuntimeConfig = &forgepb.RuntimeConfig{MaxFindByIds: h.s.opts.MaxFindByIDs}
	}
	return res, nil
}

// listIDs returns the IDs of kind that are ingested and not dropped by a
// fault on method.
func (h *handler) listIDs(method, kind string, keep func(*device) bool) []string {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	var ids []string
	for _, d := range h.s.devices {
		if d.Kind != kind || !d.gateOpen || (keep != nil && !keep(d)) {
			continue
		}
		if _, drop := h.take(sim.FaultDrop, method, d.ID, d); drop {
			continue
		}
		ids = append(ids, d.ID)
	}
	return ids
}

func (h *handler) FindMachineIds(ctx context.Context, req *forgepb.MachineSearchConfig) (res *forgepb.MachineIdList, err error) {
	defer h.endListing("FindMachineIds", req.GetOnlyWithHealthAlert(), &err)
	if err := h.begin(ctx, "FindMachineIds", nil); err != nil {
		return nil, err
	}
	now := h.s.clock.Now()
	ids := h.listIDs("FindMachineIds", KindCompute, func(d *device) bool {
		if req.RackId != nil && d.RackID != req.GetRackId().GetId() {
			return false
		}
		if req.OnlyWithPowerState != nil {
			h.s.advance(d, now)
			if (req.GetOnlyWithPowerState() == "on") != d.on {
				return false
			}
		}
		if req.OnlyWithHealthAlert != nil && !slices.Contains(d.Alerts, req.GetOnlyWithHealthAlert()) {
			return false
		}
		return true
	})
	res = &forgepb.MachineIdList{}
	for _, id := range ids {
		res.MachineIds = append(res.MachineIds, &forgepb.MachineId{Id: id})
	}
	if req.GetIncludeDpus() {
		h.s.mu.Lock()
		for _, id := range ids {
			if d := h.s.byID(KindCompute, id); d != nil {
				for _, p := range d.DPUs {
					res.MachineIds = append(res.MachineIds, &forgepb.MachineId{Id: p.ID})
				}
			}
		}
		h.s.mu.Unlock()
	}
	return res, nil
}

func (s *Sim) health(d *device, now time.Time) *forgepb.HealthReport {
	hr := &forgepb.HealthReport{Source: "nicosim", ObservedAt: timestamppb.New(d.healthAt)}
	for _, a := range d.Alerts {
		hr.Alerts = append(hr.Alerts, &forgepb.HealthProbeAlert{Id: a, Message: a, InAlertSince: timestamppb.New(d.healthAt)})
	}
	return hr
}

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// byIDs returns the devices of kind named by ids, leaving out unknown ones
// and those a drop fault on method removes.
func (h *handler) byIDs(method, kind string, ids []string, each func(*device, time.Time)) error {
	if limit := h.s.opts.MaxFindByIDs; limit > 0 && len(ids) > int(limit) {
		return errInvalid(fmt.Sprintf("at most %d IDs per request (max_find_by_ids)", limit))
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	for _, id := range ids {
		d := h.s.byID(kind, id)
		if d == nil {
			continue
		}
		if _, drop := h.take(sim.FaultDrop, method, id, d); drop {
			continue
		}
		h.s.advance(d, now)
		each(d, now)
	}
	return nil
}

func (h *handler) FindMachinesByIds(ctx context.Context, req *forgepb.MachinesByIdsRequest) (res *forgepb.MachineList, err error) {
	ids := idsOf(req.GetMachineIds())
	defer h.end("FindMachinesByIds", ids, &err)
	if err := h.begin(ctx, "FindMachinesByIds", ids); err != nil {
		return nil, err
	}
	res = &forgepb.MachineList{}
	err = h.byIDs("FindMachinesByIds", KindCompute, ids, func(d *device, now time.Time) {
		complete := false
		for _, j := range d.jobs {
			complete = j.applied
		}
		m := &forgepb.Machine{
			Id:          &forgepb.MachineId{Id: d.ID},
			State:       d.lifecycle(h.s, now),
			MachineType: forgepb.MachineType_MACHINE_TYPE_HOST,
			BmcInfo:     &forgepb.BmcInfo{Ip: optStr(d.BMCIP), Mac: optStr(d.BMCMAC), FirmwareVersion: optStr(d.Firmware["bmc"])},
			Status: &forgepb.MachineStatus{
				DiscoveryInfo:  &forgepb.DiscoveryInfo{DmiData: &forgepb.DmiData{ChassisSerial: d.Serial}},
				Health:         h.s.health(d, now),
				UpdateComplete: complete,
			},
		}
		for _, p := range d.DPUs {
			m.Status.AssociatedDpuMachineIds = append(m.Status.AssociatedDpuMachineIds, &forgepb.MachineId{Id: p.ID})
		}
		res.Machines = append(res.Machines, m)
	})
	if err != nil {
		return nil, err
	}
	// DPU machines, asked for by the IDs their hosts report.
	h.s.mu.Lock()
	for _, id := range ids {
		ref, ok := h.s.dpuIndex[id]
		if !ok {
			continue
		}
		if _, drop := h.take(sim.FaultDrop, "FindMachinesByIds", id, nil); drop {
			continue
		}
		p := ref.host.DPUs[ref.i]
		res.Machines = append(res.Machines, &forgepb.Machine{
			Id: &forgepb.MachineId{Id: p.ID}, State: ref.host.State, MachineType: forgepb.MachineType_MACHINE_TYPE_DPU,
			BmcInfo: &forgepb.BmcInfo{Ip: optStr(p.BMCIP), Mac: optStr(p.BMCMAC)},
		})
	}
	h.s.mu.Unlock()
	return res, nil
}

func (h *handler) FindSwitchIds(ctx context.Context, req *forgepb.SwitchSearchFilter) (res *forgepb.SwitchIdList, err error) {
	defer h.endListing("FindSwitchIds", req.GetOnlyWithHealthAlert(), &err)
	if err := h.begin(ctx, "FindSwitchIds", nil); err != nil {
		return nil, err
	}
	ids := h.listIDs("FindSwitchIds", KindNVSwitch, func(d *device) bool {
		return req.OnlyWithHealthAlert == nil || slices.Contains(d.Alerts, req.GetOnlyWithHealthAlert())
	})
	res = &forgepb.SwitchIdList{}
	for _, id := range ids {
		res.Ids = append(res.Ids, &forgepb.SwitchId{Id: id})
	}
	return res, nil
}

func (h *handler) FindSwitchesByIds(ctx context.Context, req *forgepb.SwitchesByIdsRequest) (res *forgepb.SwitchList, err error) {
	ids := idsOf(req.GetSwitchIds())
	defer h.end("FindSwitchesByIds", ids, &err)
	if err := h.begin(ctx, "FindSwitchesByIds", ids); err != nil {
		return nil, err
	}
	res = &forgepb.SwitchList{}
	err = h.byIDs("FindSwitchesByIds", KindNVSwitch, ids, func(d *device, now time.Time) {
		sw := &forgepb.Switch{
			Id:              &forgepb.SwitchId{Id: d.ID},
			Status:          &forgepb.SwitchStatus{Health: h.s.health(d, now)},
			ControllerState: d.lifecycle(h.s, now),
			BmcInfo:         &forgepb.BmcInfo{Ip: optStr(d.BMCIP), Mac: optStr(d.BMCMAC)},
			NvosInfo:        &forgepb.SwitchNvosInfo{Ip: optStr(d.BMCIP)},
		}
		if d.NVLinkDomain != "" {
			sw.NvlinkDomainUuid = &forgepb.NVLinkDomainId{Value: d.NVLinkDomain}
		}
		if d.RackID != "" {
			sw.RackId = &forgepb.RackId{Id: d.RackID}
		}
		res.Switches = append(res.Switches, sw)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (h *handler) FindPowerShelfIds(ctx context.Context, _ *forgepb.PowerShelfSearchFilter) (res *forgepb.PowerShelfIdList, err error) {
	defer h.end("FindPowerShelfIds", nil, &err)
	if err := h.begin(ctx, "FindPowerShelfIds", nil); err != nil {
		return nil, err
	}
	res = &forgepb.PowerShelfIdList{}
	for _, id := range h.listIDs("FindPowerShelfIds", KindPowerShelf, nil) {
		res.Ids = append(res.Ids, &forgepb.PowerShelfId{Id: id})
	}
	return res, nil
}

func (h *handler) FindPowerShelvesByIds(ctx context.Context, req *forgepb.PowerShelvesByIdsRequest) (res *forgepb.PowerShelfList, err error) {
	ids := idsOf(req.GetPowerShelfIds())
	defer h.end("FindPowerShelvesByIds", ids, &err)
	if err := h.begin(ctx, "FindPowerShelvesByIds", ids); err != nil {
		return nil, err
	}
	res = &forgepb.PowerShelfList{}
	err = h.byIDs("FindPowerShelvesByIds", KindPowerShelf, ids, func(d *device, now time.Time) {
		ps := &forgepb.PowerShelf{
			Id:              &forgepb.PowerShelfId{Id: d.ID},
			Status:          &forgepb.PowerShelfStatus{Health: h.s.health(d, now)},
			ControllerState: d.lifecycle(h.s, now),
			BmcInfo:         &forgepb.BmcInfo{Ip: optStr(d.BMCIP), Mac: optStr(d.BMCMAC)},
		}
		if d.RackID != "" {
			ps.RackId = &forgepb.RackId{Id: d.RackID}
		}
		res.PowerShelves = append(res.PowerShelves, ps)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// addExpected records an expected object (idempotent by MAC) and, when no
// device has that MAC yet, creates one behind a closed ingestion gate, as a
// site explorer would discover it.
func (h *handler) addExpected(kind, mac, serial, rackID, ip string, md *forgepb.Metadata) error {
	if mac == "" {
		return errInvalid("bmc_mac_address is required")
	}
	labels := map[string]string{}
	for _, l := range md.GetLabels() {
		if l.Value != nil {
			labels[l.GetKey()] = l.GetValue()
		}
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.expected[kind][normMAC(mac)] = &expected{mac: mac, serial: serial, rackID: rackID, ip: ip, labels: labels, name: md.GetName()}
	if h.s.byMAC(mac) == nil {
		h.s.upsert(Device{Kind: kind, BMCMAC: mac, BMCIP: ip, Serial: serial, RackID: rackID, AwaitingIngestion: true})
	}
	return nil
}

func (h *handler) AddExpectedMachine(ctx context.Context, req *forgepb.ExpectedMachine) (res *emptypb.Empty, err error) {
	devs := []string{req.GetBmcMacAddress()}
	defer h.end("AddExpectedMachine", devs, &err)
	if err := h.begin(ctx, "AddExpectedMachine", devs); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, h.addExpected(KindCompute, req.GetBmcMacAddress(), req.GetChassisSerialNumber(), req.GetRackId().GetId(), req.GetBmcIpAddress(), req.GetMetadata())
}

func (h *handler) AddExpectedSwitch(ctx context.Context, req *forgepb.ExpectedSwitch) (res *emptypb.Empty, err error) {
	devs := []string{req.GetBmcMacAddress()}
	defer h.end("AddExpectedSwitch", devs, &err)
	if err := h.begin(ctx, "AddExpectedSwitch", devs); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, h.addExpected(KindNVSwitch, req.GetBmcMacAddress(), req.GetSwitchSerialNumber(), req.GetRackId().GetId(), req.GetBmcIpAddress(), req.GetMetadata())
}

func (h *handler) AddExpectedPowerShelf(ctx context.Context, req *forgepb.ExpectedPowerShelf) (res *emptypb.Empty, err error) {
	devs := []string{req.GetBmcMacAddress()}
	defer h.end("AddExpectedPowerShelf", devs, &err)
	if err := h.begin(ctx, "AddExpectedPowerShelf", devs); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, h.addExpected(KindPowerShelf, req.GetBmcMacAddress(), req.GetShelfSerialNumber(), req.GetRackId().GetId(), req.GetBmcIpAddress(), req.GetMetadata())
}

func (h *handler) expectedOf(kind string) []*expected {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	// The map's keys are the normalised MACs: the order the list is served
	// in.
	byMAC := h.s.expected[kind]
	out := make([]*expected, 0, len(byMAC))
	for _, mac := range slices.Sorted(maps.Keys(byMAC)) {
		out = append(out, byMAC[mac])
	}
	return out
}

func metadataOf(labels map[string]string) *forgepb.Metadata {
	return namedMetadata("", labels)
}

func namedMetadata(name string, labels map[string]string) *forgepb.Metadata {
	md := &forgepb.Metadata{Name: name, Labels: make([]*forgepb.Label, 0, len(labels))}
	for k, v := range labels {
		md.Labels = append(md.Labels, &forgepb.Label{Key: k, Value: &v})
	}
	slices.SortFunc(md.Labels, func(a, b *forgepb.Label) int { return strings.Compare(a.Key, b.Key) })
	return md
}

func rackOf(id string) *forgepb.RackId {
	if id == "" {
		return nil
	}
	return &forgepb.RackId{Id: id}
}

func (h *handler) GetAllExpectedMachines(ctx context.Context, _ *emptypb.Empty) (res *forgepb.ExpectedMachineList, err error) {
	defer h.end("GetAllExpectedMachines", nil, &err)
	if err := h.begin(ctx, "GetAllExpectedMachines", nil); err != nil {
		return nil, err
	}
	res = &forgepb.ExpectedMachineList{}
	for _, e := range h.expectedOf(KindCompute) {
		res.ExpectedMachines = append(res.ExpectedMachines, &forgepb.ExpectedMachine{BmcMacAddress: e.mac, ChassisSerialNumber: e.serial, RackId: rackOf(e.rackID), BmcIpAddress: optStr(e.ip), Metadata: namedMetadata(e.name, e.labels)})
	}
	return res, nil
}

func (h *handler) GetAllExpectedSwitches(ctx context.Context, _ *emptypb.Empty) (res *forgepb.ExpectedSwitchList, err error) {
	defer h.end("GetAllExpectedSwitches", nil, &err)
	if err := h.begin(ctx, "GetAllExpectedSwitches", nil); err != nil {
		return nil, err
	}
	res = &forgepb.ExpectedSwitchList{}
	for _, e := range h.expectedOf(KindNVSwitch) {
		res.ExpectedSwitches = append(res.ExpectedSwitches, &forgepb.ExpectedSwitch{BmcMacAddress: e.mac, SwitchSerialNumber: e.serial, RackId: rackOf(e.rackID), BmcIpAddress: e.ip, Metadata: namedMetadata(e.name, e.labels)})
	}
	return res, nil
}

func (h *handler) GetAllExpectedPowerShelves(ctx context.Context, _ *emptypb.Empty) (res *forgepb.ExpectedPowerShelfList, err error) {
	defer h.end("GetAllExpectedPowerShelves", nil, &err)
	if err := h.begin(ctx, "GetAllExpectedPowerShelves", nil); err != nil {
		return nil, err
	}
	res = &forgepb.ExpectedPowerShelfList{}
	for _, e := range h.expectedOf(KindPowerShelf) {
		res.ExpectedPowerShelves = append(res.ExpectedPowerShelves, &forgepb.ExpectedPowerShelf{BmcMacAddress: e.mac, ShelfSerialNumber: e.serial, RackId: rackOf(e.rackID), BmcIpAddress: e.ip, Metadata: namedMetadata(e.name, e.labels)})
	}
	return res, nil
}

// endpoint finds the device an ingestion call names: by BMC IP, Core ID or
// BMC MAC (Flow sends the component identifier as ip_address).
func (s *Sim) endpoint(addr string) *device {
	for _, d := range s.devices {
		if (d.BMCIP != "" && d.BMCIP == addr) || d.ID == addr || normMAC(d.BMCMAC) == normMAC(addr) {
			return d
		}
	}
	return nil
}

func (h *handler) AllowIngestionAndPowerOn(ctx context.Context, req *forgepb.BmcEndpointRequest) (res *emptypb.Empty, err error) {
	devs := []string{req.GetIpAddress()}
	defer h.end("AllowIngestionAndPowerOn", devs, &err)
	if err := h.begin(ctx, "AllowIngestionAndPowerOn", devs); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	d := h.s.endpoint(req.GetIpAddress())
	if d == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no explored endpoint "+req.GetIpAddress()))
	}
	if !d.gateOpen {
		now := h.s.clock.Now()
		d.gateOpen, d.gateAt = true, now
		h.s.advance(d, now)
		if !d.on {
			h.s.schedulePower(d, now, true)
		}
	}
	return &emptypb.Empty{}, nil
}

func (h *handler) DetermineMachineIngestionState(ctx context.Context, req *forgepb.BmcEndpointRequest) (res *forgepb.MachineIngestionStateResponse, err error) {
	devs := []string{req.GetIpAddress()}
	defer h.end("DetermineMachineIngestionState", devs, &err)
	if err := h.begin(ctx, "DetermineMachineIngestionState", devs); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	res = &forgepb.MachineIngestionStateResponse{MachineIngestionState: forgepb.MachineIngestionState_NotDiscovered}
	if d := h.s.endpoint(req.GetIpAddress()); d != nil {
		res.MachineIngestionState = forgepb.MachineIngestionState(forgepb.MachineIngestionState_value[h.s.ingestion(d, h.s.clock.Now())])
	}
	return res, nil
}

// decommission starts decommissioning: accepted only from Ready, and the
// decommissioning state is set before the call returns.
func (h *handler) decommission(ctx context.Context, method, kind, id string) (err error) {
	devs := []string{id}
	defer h.end(method, devs, &err)
	if err := h.begin(ctx, method, devs); err != nil {
		return err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	d := h.s.byID(kind, id)
	if d == nil {
		return connect.NewError(connect.CodeNotFound, errors.New(kind+" "+id+" not found"))
	}
	now := h.s.clock.Now()
	if !d.ready(h.s, now) {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New(kind+" "+id+" is not Ready"))
	}
	d.decomming, d.decomAt = true, now
	_, d.decomStuck = h.take(sim.FaultStuck, method, id, d)
	_, d.decomFail = h.take(sim.FaultFail, method, id, d)
	return nil
}

func (h *handler) DecommissionManagedHost(ctx context.Context, req *forgepb.DecommissionManagedHostRequest) (*forgepb.DecommissionManagedHostResponse, error) {
	if err := h.decommission(ctx, "DecommissionManagedHost", KindCompute, req.GetMachineId().GetId()); err != nil {
		return nil, err
	}
	return &forgepb.DecommissionManagedHostResponse{}, nil
}

func (h *handler) DecommissionSwitch(ctx context.Context, req *forgepb.DecommissionSwitchRequest) (*forgepb.DecommissionSwitchResponse, error) {
	if err := h.decommission(ctx, "DecommissionSwitch", KindNVSwitch, req.GetSwitchId().GetId()); err != nil {
		return nil, err
	}
	return &forgepb.DecommissionSwitchResponse{}, nil
}

func (h *handler) DecommissionPowerShelf(ctx context.Context, req *forgepb.DecommissionPowerShelfRequest) (*forgepb.DecommissionPowerShelfResponse, error) {
	if err := h.decommission(ctx, "DecommissionPowerShelf", KindPowerShelf, req.GetPowerShelfId().GetId()); err != nil {
		return nil, err
	}
	return &forgepb.DecommissionPowerShelfResponse{}, nil
}

// itemFault applies an item fault to r and reports whether one fired.
func (h *handler) itemFault(method, key string, d *device, r *forgepb.ComponentResult) bool {
	f, ok := h.take(sim.FaultItem, method, key, d)
	if !ok {
		return false
	}
	st, known := itemStatus[f.Status]
	if !known {
		st = forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_INTERNAL_ERROR
	}
	r.Status = st
	r.Error = cmp.Or(f.Message, "injected item fault")
	return true
}

// unreported answers r as a device whose installed versions Core cannot
// read (Device.Unreported).
func unreported(r *forgepb.ComponentResult) {
	r.Status = forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_UNAVAILABLE
	r.Error = errUnreported.Error()
}

func notFound(r *forgepb.ComponentResult, key string) *forgepb.ComponentResult {
	r.Status = forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_NOT_FOUND
	r.Error = "component " + key + " not found"
	return r
}

func powerTarget(req *forgepb.ComponentPowerControlRequest) (target, bool) {
	switch t := req.GetTarget().(type) {
	case *forgepb.ComponentPowerControlRequest_MachineIds:
		return target{kind: KindCompute, keys: idsOf(t.MachineIds.GetMachineIds())}, true
	case *forgepb.ComponentPowerControlRequest_SwitchIds:
		return target{kind: KindNVSwitch, keys: idsOf(t.SwitchIds.GetIds())}, true
	case *forgepb.ComponentPowerControlRequest_PowerShelfIds:
		return target{kind: KindPowerShelf, keys: idsOf(t.PowerShelfIds.GetIds())}, true
	case *forgepb.ComponentPowerControlRequest_ComputeBmcMacs:
		return target{kind: KindCompute, keys: t.ComputeBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.ComponentPowerControlRequest_SwitchBmcMacs:
		return target{kind: KindNVSwitch, keys: t.SwitchBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.ComponentPowerControlRequest_PowerShelfPmcMacs:
		return target{kind: KindPowerShelf, keys: t.PowerShelfPmcMacs.GetMacAddresses(), isMAC: true}, true
	}
	return target{}, false
}

func (h *handler) ComponentPowerControl(ctx context.Context, req *forgepb.ComponentPowerControlRequest) (res *forgepb.ComponentPowerControlResponse, err error) {
	const method = "ComponentPowerControl"
	t, ok := powerTarget(req)
	defer h.endAction(method, req.GetAction().String(), t.keys, &err)
	if err := h.begin(ctx, method, t.keys); err != nil {
		return nil, err
	}
	if !ok || len(t.keys) == 0 {
		return nil, errInvalid("a target list is required")
	}
	var steps []bool
	switch req.GetAction() {
	case forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_ON:
		steps = []bool{true}
	case forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_GRACEFUL_SHUTDOWN, forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_FORCE_OFF:
		steps = []bool{false}
	case forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_GRACEFUL_RESTART, forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_FORCE_RESTART:
		steps = []bool{false, true}
	case forgepb.SystemPowerControl_SYSTEM_POWER_CONTROL_AC_POWERCYCLE:
		if t.kind != KindCompute {
			return nil, errInvalid("AC power cycle is supported for compute trays only")
		}
		steps = []bool{false, true}
	default:
		return nil, errInvalid("unknown power action")
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &forgepb.ComponentPowerControlResponse{}
	for _, key := range t.keys {
		d := h.s.lookup(t, key)
		r := t.result(key, d)
		switch {
		case d == nil:
			notFound(r, key)
		case h.itemFault(method, key, d, r):
		default:
			h.s.advance(d, now)
			h.s.schedulePower(d, now, steps...)
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

func inventoryTarget(req *forgepb.GetComponentInventoryRequest) (target, bool) {
	switch t := req.GetTarget().(type) {
	case *forgepb.GetComponentInventoryRequest_MachineIds:
		return target{kind: KindCompute, keys: idsOf(t.MachineIds.GetMachineIds())}, true
	case *forgepb.GetComponentInventoryRequest_SwitchIds:
		return target{kind: KindNVSwitch, keys: idsOf(t.SwitchIds.GetIds())}, true
	case *forgepb.GetComponentInventoryRequest_PowerShelfIds:
		return target{kind: KindPowerShelf, keys: idsOf(t.PowerShelfIds.GetIds())}, true
	case *forgepb.GetComponentInventoryRequest_ComputeBmcMacs:
		return target{kind: KindCompute, keys: t.ComputeBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.GetComponentInventoryRequest_SwitchBmcMacs:
		return target{kind: KindNVSwitch, keys: t.SwitchBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.GetComponentInventoryRequest_PowerShelfPmcMacs:
		return target{kind: KindPowerShelf, keys: t.PowerShelfPmcMacs.GetMacAddresses(), isMAC: true}, true
	}
	return target{}, false
}

var powerEnum = map[string]forgepb.ComputerSystemPowerState{
	"on": forgepb.ComputerSystemPowerState_On, "off": forgepb.ComputerSystemPowerState_Off,
	"powering_on": forgepb.ComputerSystemPowerState_PoweringOn, "powering_off": forgepb.ComputerSystemPowerState_PoweringOff,
}

// inventoryIDs names each firmware component the way Redfish inventories
// do, so clients exercise their version-precedence rules.
var inventoryIDs = map[string]string{"bmc": "FW_BMC_0", "bios": "FW_BIOS_0", "cpld": "FW_CPLD_0", "nvos": "FW_NVOS_0", "pmc": "FW_PMC_0", "psu": "FW_PSU_0"}

// inventoryName is a firmware component's inventory ID and description.
type inventoryName struct{ id, description string }

// knownInventoryNames are inventoryNames of inventoryIDs' components,
// built once (a sync reads tens of thousands of reports).
var knownInventoryNames = func() map[string]inventoryName {
	out := make(map[string]inventoryName, len(inventoryIDs))
	for c, id := range inventoryIDs {
		out[c] = inventoryName{id: id, description: strings.ToUpper(c) + " image"}
	}
	return out
}()

func inventoryNames(c string) inventoryName {
	if n, ok := knownInventoryNames[c]; ok {
		return n
	}
	return inventoryName{id: "FW_" + strings.ToUpper(c) + "_0", description: strings.ToUpper(c) + " image"}
}

func (h *handler) GetComponentInventory(ctx context.Context, req *forgepb.GetComponentInventoryRequest) (res *forgepb.GetComponentInventoryResponse, err error) {
	const method = "GetComponentInventory"
	t, ok := inventoryTarget(req)
	defer h.end(method, t.keys, &err)
	if err := h.begin(ctx, method, t.keys); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errInvalid("a target list is required")
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &forgepb.GetComponentInventoryResponse{}
	for _, key := range t.keys {
		d := h.s.lookup(t, key)
		if _, drop := h.take(sim.FaultDrop, method, key, d); drop {
			continue
		}
		e := &forgepb.ComponentInventoryEntry{Result: t.result(key, d)}
		switch {
		case d == nil:
			notFound(e.Result, key)
		case h.itemFault(method, key, d, e.Result):
		case d.Unreported && d.Kind != KindCompute:
			unreported(e.Result)
		default:
			h.s.advance(d, now)
			rep := &forgepb.EndpointExplorationReport{
				// Always set, so Off (1) travels; On is the zero value.
				Systems:          []*forgepb.ComputerSystem{{PowerState: powerEnum[d.powerName(now)]}},
				Chassis:          []*forgepb.Chassis{{SerialNumber: optStr(d.Serial)}},
				FirmwareVersions: map[string]string{},
			}
			svc := &forgepb.Service{Inventories: make([]*forgepb.Inventory, 0, len(d.Firmware))}
			for _, c := range slices.Sorted(mapsKeys(d.Firmware)) {
				rep.FirmwareVersions[c] = d.Firmware[c]
				n := inventoryNames(c)
				for i := range max(d.Instances[c], 1) {
					id := n.id
					if i > 0 {
						id = strings.TrimSuffix(id, "0") + strconv.Itoa(i)
					}
					svc.Inventories = append(svc.Inventories, &forgepb.Inventory{Id: id, Description: optStr(n.description), Version: optStr(d.Firmware[c])})
				}
			}
			rep.Service = []*forgepb.Service{svc}
			e.Report = rep
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// defaultBundle is what an update with no components named installs.
var defaultBundle = map[string][]string{
	KindCompute:    {"bmc", "bios"},
	KindNVSwitch:   {"bmc", "cpld", "bios", "nvos"},
	KindPowerShelf: {"pmc"},
}

func componentNames[E interface{ String() string }](cs []E, prefix string) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, strings.ToLower(strings.TrimPrefix(c.String(), prefix)))
	}
	return out
}

func (h *handler) UpdateComponentFirmware(ctx context.Context, req *forgepb.UpdateComponentFirmwareRequest) (res *forgepb.UpdateComponentFirmwareResponse, err error) {
	const method = "UpdateComponentFirmware"
	var (
		t          target
		ids, macs  []string
		components []string
	)
	switch x := req.GetTarget().(type) {
	case *forgepb.UpdateComponentFirmwareRequest_ComputeTrays:
		t.kind = KindCompute
		ids, macs = idsOf(x.ComputeTrays.GetMachineIds().GetMachineIds()), x.ComputeTrays.GetBmcMacs().GetMacAddresses()
		components = componentNames(x.ComputeTrays.GetComponents(), "COMPUTE_TRAY_COMPONENT_")
	case *forgepb.UpdateComponentFirmwareRequest_Switches:
		t.kind = KindNVSwitch
		ids, macs = idsOf(x.Switches.GetSwitchIds().GetIds()), x.Switches.GetBmcMacs().GetMacAddresses()
		components = componentNames(x.Switches.GetComponents(), "NV_SWITCH_COMPONENT_")
	case *forgepb.UpdateComponentFirmwareRequest_PowerShelves:
		t.kind = KindPowerShelf
		ids, macs = idsOf(x.PowerShelves.GetPowerShelfIds().GetIds()), x.PowerShelves.GetPmcMacs().GetMacAddresses()
		components = componentNames(x.PowerShelves.GetComponents(), "POWER_SHELF_COMPONENT_")
	case *forgepb.UpdateComponentFirmwareRequest_Racks:
		t.kind, ids = kindRack, idsOf(x.Racks.GetRackIds().GetRackIds())
	}
	t.keys, t.isMAC = ids, false
	if len(macs) > 0 {
		t.keys, t.isMAC = macs, true
	}
	defer h.end(method, t.keys, &err)
	if err := h.begin(ctx, method, t.keys); err != nil {
		return nil, err
	}
	if t.kind == "" || (len(ids) == 0) == (len(macs) == 0) {
		return nil, errInvalid("exactly one of the ID and MAC lists must be set")
	}
	plan, err := parsePlan(req.GetTargetVersion(), components)
	if err != nil {
		return nil, err
	}
	if t.kind != kindRack {
		if err := plan.check(t.kind); err != nil {
			return nil, err
		}
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &forgepb.UpdateComponentFirmwareResponse{}
	for _, key := range t.keys {
		if t.kind == kindRack {
			// A rack update brings every ingested device of the rack to
			// the version, each with its kind's default bundle; the
			// result is the rack's.
			r := &forgepb.ComponentResult{ComponentId: &key}
			members := h.s.rackMembers(key)
			if len(members) == 0 {
				notFound(r, key)
			} else if !h.itemFault(method, key, nil, r) {
				for _, d := range members {
					cs, version := plan.jobs(d.Kind, nil)
					h.startJobs(method, d.ID, d, cs, version, req.GetForceUpdate(), now)
				}
			}
			res.Results = append(res.Results, r)
			continue
		}
		d := h.s.lookup(t, key)
		r := t.result(key, d)
		switch {
		case d == nil:
			notFound(r, key)
		case h.itemFault(method, key, d, r):
		default:
			cs, version := plan.jobs(t.kind, components)
			h.startJobs(method, key, d, cs, version, req.GetForceUpdate(), now)
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

func orDefault(cs, def []string) []string {
	if len(cs) == 0 {
		return def
	}
	return cs
}

// kindRack is the target kind of the rack oneof cases; no device has it.
const kindRack = "rack"

// rackMembers returns the ingested devices of rack id, in seed order.
func (s *Sim) rackMembers(id string) []*device {
	var out []*device
	for _, d := range s.devices {
		if d.RackID == id && d.gateOpen {
			out = append(out, d)
		}
	}
	return out
}

// startJobs replaces d's firmware jobs with one per component, each at
// version(component), applying the fail, stuck, cancel and lie faults for
// key (those naming a sub-component act on its job only, and a failure
// they cause names it).
func (h *handler) startJobs(method, key string, d *device, components []string, version func(string) string, force bool, now time.Time) {
	h.s.advance(d, now)
	d.jobs = nil
	for _, c := range components {
		j := &job{component: c, target: version(c), created: now}
		if !force && d.Firmware[c] == j.target {
			j.created = now.Add(-time.Duration(len(phases)) * h.s.opts.FirmwarePhase)
		}
		if f, ok := h.takeJob(sim.FaultFail, method, key, d, c); ok {
			j.failPhase, j.message = cmp.Or(f.Phase, phaseInProgress), f.Message
			if f.Component != "" {
				j.message = c + ": " + cmp.Or(f.Message, "firmware update failed in "+j.failPhase)
			}
		} else if f, ok := h.takeJob(sim.FaultStuck, method, key, d, c); ok {
			j.stuckPhase = cmp.Or(f.Phase, phaseInProgress)
		} else if f, ok := h.takeJob(sim.FaultCancel, method, key, d, c); ok {
			j.cancelPhase, j.message = cmp.Or(f.Phase, phaseInProgress), f.Message
		} else if _, ok := h.takeJob(sim.FaultLie, method, key, d, c); ok {
			j.lie = true
		}
		d.jobs = append(d.jobs, j)
	}
	h.s.advance(d, now)
}

var fwState = map[string]forgepb.FirmwareUpdateState{
	phaseQueued: forgepb.FirmwareUpdateState_FW_STATE_QUEUED, phaseInProgress: forgepb.FirmwareUpdateState_FW_STATE_IN_PROGRESS,
	phaseVerifying: forgepb.FirmwareUpdateState_FW_STATE_VERIFYING, phaseCompleted: forgepb.FirmwareUpdateState_FW_STATE_COMPLETED,
	phaseFailed: forgepb.FirmwareUpdateState_FW_STATE_FAILED, phaseCancelled: forgepb.FirmwareUpdateState_FW_STATE_CANCELLED,
}

func statusTarget(req *forgepb.GetComponentFirmwareStatusRequest) (target, bool) {
	switch t := req.GetTarget().(type) {
	case *forgepb.GetComponentFirmwareStatusRequest_MachineIds:
		return target{kind: KindCompute, keys: idsOf(t.MachineIds.GetMachineIds())}, true
	case *forgepb.GetComponentFirmwareStatusRequest_SwitchIds:
		return target{kind: KindNVSwitch, keys: idsOf(t.SwitchIds.GetIds())}, true
	case *forgepb.GetComponentFirmwareStatusRequest_PowerShelfIds:
		return target{kind: KindPowerShelf, keys: idsOf(t.PowerShelfIds.GetIds())}, true
	case *forgepb.GetComponentFirmwareStatusRequest_RackIds:
		return target{kind: kindRack, keys: idsOf(t.RackIds.GetRackIds())}, true
	case *forgepb.GetComponentFirmwareStatusRequest_ComputeBmcMacs:
		return target{kind: KindCompute, keys: t.ComputeBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.GetComponentFirmwareStatusRequest_SwitchBmcMacs:
		return target{kind: KindNVSwitch, keys: t.SwitchBmcMacs.GetMacAddresses(), isMAC: true}, true
	case *forgepb.GetComponentFirmwareStatusRequest_PowerShelfPmcMacs:
		return target{kind: KindPowerShelf, keys: t.PowerShelfPmcMacs.GetMacAddresses(), isMAC: true}, true
	}
	return target{}, false
}

func (h *handler) GetComponentFirmwareStatus(ctx context.Context, req *forgepb.GetComponentFirmwareStatusRequest) (res *forgepb.GetComponentFirmwareStatusResponse, err error) {
	const method = "GetComponentFirmwareStatus"
	t, ok := statusTarget(req)
	defer h.end(method, t.keys, &err)
	if err := h.begin(ctx, method, t.keys); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errInvalid("a target list is required")
	}
	res = &forgepb.GetComponentFirmwareStatusResponse{}
	if _, empty := h.s.faults.TakeAny(sim.FaultEmpty, method, t.keys); empty {
		return res, nil
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	for _, m := range h.s.expand(t) {
		key, d, mt := m.key, m.d, m.t
		if d == nil {
			continue
		}
		if _, drop := h.take(sim.FaultDrop, method, key, d); drop {
			continue
		}
		h.s.advance(d, now)
		for _, j := range d.jobs {
			st := &forgepb.FirmwareUpdateStatus{Result: mt.result(key, d), TargetVersion: j.target}
			if !h.itemFault(method, key, d, st.Result) {
				state, msg := h.s.jobState(j, now)
				st.State, st.Result.Error = fwState[state], msg
			}
			res.Statuses = append(res.Statuses, st)
		}
	}
	return res, nil
}

func (h *handler) ListComponentFirmwareVersions(ctx context.Context, req *forgepb.ListComponentFirmwareVersionsRequest) (res *forgepb.ListComponentFirmwareVersionsResponse, err error) {
	const method = "ListComponentFirmwareVersions"
	var t target
	switch x := req.GetTarget().(type) {
	case *forgepb.ListComponentFirmwareVersionsRequest_MachineIds:
		t = target{kind: KindCompute, keys: idsOf(x.MachineIds.GetMachineIds())}
	case *forgepb.ListComponentFirmwareVersionsRequest_SwitchIds:
		t = target{kind: KindNVSwitch, keys: idsOf(x.SwitchIds.GetIds())}
	case *forgepb.ListComponentFirmwareVersionsRequest_PowerShelfIds:
		t = target{kind: KindPowerShelf, keys: idsOf(x.PowerShelfIds.GetIds())}
	case *forgepb.ListComponentFirmwareVersionsRequest_RackIds:
		t = target{kind: kindRack, keys: idsOf(x.RackIds.GetRackIds())}
	case *forgepb.ListComponentFirmwareVersionsRequest_ComputeBmcMacs:
		t = target{kind: KindCompute, keys: x.ComputeBmcMacs.GetMacAddresses(), isMAC: true}
	case *forgepb.ListComponentFirmwareVersionsRequest_SwitchBmcMacs:
		t = target{kind: KindNVSwitch, keys: x.SwitchBmcMacs.GetMacAddresses(), isMAC: true}
	case *forgepb.ListComponentFirmwareVersionsRequest_PowerShelfPmcMacs:
		t = target{kind: KindPowerShelf, keys: x.PowerShelfPmcMacs.GetMacAddresses(), isMAC: true}
	}
	defer h.end(method, t.keys, &err)
	if err := h.begin(ctx, method, t.keys); err != nil {
		return nil, err
	}
	if t.kind == "" {
		return nil, errInvalid("a target list is required")
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &forgepb.ListComponentFirmwareVersionsResponse{}
	for _, m := range h.s.expand(t) {
		e := &forgepb.DeviceFirmwareVersions{Result: m.t.result(m.key, m.d)}
		switch {
		case m.d == nil:
			notFound(e.Result, m.key)
		case h.itemFault(method, m.key, m.d, e.Result):
		case m.d.Unreported:
			unreported(e.Result)
		default:
			// Jobs due by now have installed their versions.
			h.s.advance(m.d, now)
			r := m.d.versionsOf()
			e.Versions, e.ComputeFwVersions = r.versions, r.compute
		}
		res.Devices = append(res.Devices, e)
	}
	return res, nil
}

// computeFwComponent maps a compute tray's firmware names to Core's
// sub-component enum, for compute_fw_versions.
var computeFwComponent = func() map[string]forgepb.ComputeTrayComponent {
	m := map[string]forgepb.ComputeTrayComponent{}
	for v, name := range forgepb.ComputeTrayComponent_name {
		if v != 0 {
			m[strings.ToLower(strings.TrimPrefix(name, "COMPUTE_TRAY_COMPONENT_"))] = forgepb.ComputeTrayComponent(v)
		}
	}
	return m
}()

// member is one device a target names: the key it is answered under, the
// device (nil when unknown) and the target whose result shape it takes.
type member struct {
	key string
	d   *device
	t   target
}

// expand resolves t's keys to devices. A rack key stands for the rack's
// ingested devices, each answered by its Core ID; an unknown or empty
// rack is one member with no device, answered by the rack ID.
func (s *Sim) expand(t target) []member {
	out := make([]member, 0, len(t.keys))
	for _, key := range t.keys {
		if t.kind != kindRack {
			out = append(out, member{key: key, d: s.lookup(t, key), t: t})
			continue
		}
		ds := s.rackMembers(key)
		if len(ds) == 0 {
			out = append(out, member{key: key, t: target{kind: kindRack}})
		}
		for _, d := range ds {
			out = append(out, member{key: d.ID, d: d, t: target{kind: d.Kind}})
		}
	}
	return out
}
