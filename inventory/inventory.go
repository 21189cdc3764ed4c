// Package inventory keeps Flow's view of the datacenter: racks, their
// components (compute trays, NVLink switch trays, power shelves, ...), the
// components' BMCs and the NVLink domains that group racks.
//
// Service holds the rules and queries; every method takes the db.DBTX (or
// pgx.Tx for writes that must be atomic with the caller's work) it runs on.
// Handler serves the inventory group of v1.Flow methods over Connect.
// Other domains (operations, firmware) use the identifier resolver
// (Service.ResolveRack, Service.ResolveComponent, Service.ResolveTargets) and
// Service.TaskStats.
package inventory

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors. Service methods wrap them with the identifier concerned,
// so test with errors.Is; the handler maps them to Connect codes.
var (
	// ErrInvalidArgument marks bad input; *FieldError wraps it.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrRackNotFound: no live rack has the given identifier.
	ErrRackNotFound = errors.New("rack not found")
	// ErrComponentNotFound: no live component has the given identifier.
	ErrComponentNotFound = errors.New("component not found")
	// ErrNVLDomainNotFound: no NVLink domain has the given identifier.
	ErrNVLDomainNotFound = errors.New("nvl domain not found")
	// ErrNVLDomainExists: another NVLink domain holds the external ID.
	ErrNVLDomainExists = errors.New("nvl domain external id already in use")
	// ErrRackExists: a rack with the same manufacturer and serial number (or
	// external ID) exists, soft-deleted ones included.
	ErrRackExists = errors.New("rack already exists")
	// ErrComponentExists: a component with the same manufacturer and serial
	// number exists, soft-deleted ones included.
	ErrComponentExists = errors.New("component already exists")
	// ErrBMCExists: the BMC MAC address already belongs to another component.
	ErrBMCExists = errors.New("bmc mac address already in use")
	// ErrRackInOtherDomain: attaching a rack that belongs to another NVLink
	// domain.
	ErrRackInOtherDomain = errors.New("rack already attached to another nvl domain")
	// ErrNotDeleted: purging a rack or component that is not soft-deleted.
	ErrNotDeleted = errors.New("not soft-deleted; delete it first")
	// ErrAmbiguous: an identifier matches more than one rack or component.
	ErrAmbiguous = errors.New("identifier is ambiguous")
	// ErrNoRack: a targeted component belongs to no rack, so no per-rack
	// task can be made for it.
	ErrNoRack = errors.New("component has no rack")
	// ErrRackFull: a component added to (or moved into) a rack would take
	// it over the limit of Service.SetMaxComponentsPerRack.
	ErrRackFull = errors.New("rack is full")
)

// FieldError is bad input in one request field. It matches
// ErrInvalidArgument with errors.Is.
type FieldError struct {
	Field  string // request field path, e.g. "rack.components[2].bmcs[0].mac_address"
	Reason string
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalidArgument.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ComponentType is the kind of a component, stored and written as upstream's
// JSON names ("Compute", "NVSwitch", ...).
type ComponentType string

// Component types. The empty ComponentType means "unknown / any".
const (
	ComponentTypeCompute    ComponentType = "Compute"
	ComponentTypeNVSwitch   ComponentType = "NVSwitch"
	ComponentTypePowerShelf ComponentType = "PowerShelf"
	ComponentTypeToRSwitch  ComponentType = "ToRSwitch"
	ComponentTypeUMS        ComponentType = "UMS"
	ComponentTypeCDU        ComponentType = "CDU"
)

// ComponentTypes lists every known component type in enum order.
var ComponentTypes = []ComponentType{
	ComponentTypeCompute, ComponentTypeNVSwitch, ComponentTypePowerShelf,
	ComponentTypeToRSwitch, ComponentTypeUMS, ComponentTypeCDU,
}

// Valid reports whether t is one of ComponentTypes.
func (t ComponentType) Valid() bool {
	for _, k := range ComponentTypes {
		if t == k {
			return true
		}
	}
	return false
}

// enumPrefix starts the wire enum's names of component types
// (COMPONENT_TYPE_COMPUTE, …).
const enumPrefix = "COMPONENT_TYPE_"

// EnumName returns t's name in the wire enum (COMPONENT_TYPE_COMPUTE, …).
func (t ComponentType) EnumName() string { return enumPrefix + strings.ToUpper(string(t)) }

// ParseComponentType returns the component type s names and whether it
// names one, compared case-insensitively with upstream's type names (what
// upstream's clients send: "Compute", "NVSwitch", "PowerShelf", "ToRSwitch",
// "UMS", "CDU") and with the wire enum's names (COMPONENT_TYPE_COMPUTE, …).
// Neither "Unknown" nor COMPONENT_TYPE_UNKNOWN names a type.
func ParseComponentType(s string) (ComponentType, bool) {
	for _, t := range ComponentTypes {
		if strings.EqualFold(s, string(t)) || strings.EqualFold(s, t.EnumName()) {
			return t, true
		}
	}
	return "", false
}

// ComponentTypeNames is what an error about an unknown type name lists.
const ComponentTypeNames = "Compute, NVSwitch, PowerShelf, ToRSwitch, UMS or CDU, in any case, or their COMPONENT_TYPE_ enum names"

// BMCType says which processor a BMC serves.
type BMCType string

// BMC types.
const (
	BMCTypeHost BMCType = "Host"
	BMCTypeDPU  BMCType = "DPU"
)

// MAC is a normalised MAC-48 address: lowercase hex pairs separated by
// colons ("aa:bb:cc:dd:ee:ff").
type MAC string

// String returns the normalised form.
func (m MAC) String() string { return string(m) }

// ParseMAC normalises a MAC-48 address written with colons, dashes or dots
// as separators (or none), in any case: "AA-BB-CC-DD-EE-FF", "aabb.ccdd.eeff"
// and "aabbccddeeff" all give "aa:bb:cc:dd:ee:ff".
func ParseMAC(s string) (MAC, error) {
	var hex []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			hex = append(hex, c)
		case c >= 'A' && c <= 'F':
			hex = append(hex, c+'a'-'A')
		case c == ':' || c == '-' || c == '.':
		default:
			return "", fmt.Errorf("invalid MAC address %q", s)
		}
	}
	if len(hex) != 12 {
		return "", fmt.Errorf("invalid MAC address %q: want 6 bytes", s)
	}
	var b strings.Builder
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.Write(hex[i : i+2])
	}
	return MAC(b.String()), nil
}

// Location is where a rack stands.
type Location struct {
	Region, Datacenter, Room, Position string
}

// Position is where a component sits inside its rack. A coordinate of
// NoSlot (any negative value) is missing: the inventory sync writes it for a
// component Core gives no position. 0 is a position like any other.
type Position struct {
	SlotID, TrayIdx, HostID int32
}

// NoSlot is the slot_id of a component whose slot is missing.
const NoSlot int32 = -1

// HasSlot reports whether the slot is known (slot_id ≥ 0; slot 0 is a
// slot).
func (p Position) HasSlot() bool { return p.SlotID >= 0 }

// BMC is one baseboard management controller of a component.
type BMC struct {
	Type BMCType
	MAC  MAC
	IP   *string
}

// TaskStats counts the unfinished tasks linked to a rack or component.
type TaskStats struct {
	Waiting, Pending, Running uint32
}

// Rack is a rack as held in the inventory.
type Rack struct {
	ID           uuid.UUID
	Name         string
	Manufacturer string
	SerialNumber string
	Model        *string
	Description  *string
	Location     Location
	ExternalID   string
	NVLDomainID  *uuid.UUID
	// Components is filled only when asked for (with_components); such
	// components carry no timestamps.
	Components []Component
	TaskStats  TaskStats
	// OperationPhase aggregates its live components' phases (RackPhase);
	// "unknown" without components.
	OperationPhase string
	// Health is Core's last health report for the rack as JSON (nil: none);
	// ProfileID is Core's rack profile ("" unknown); NVLDomainExternalID is
	// the external ID (Core rack group) of the rack's domain ("" none). The
	// three are written by the inventory sync only.
	Health              []byte
	ProfileID           string
	NVLDomainExternalID string
	// PowerFeed and CoolantLoop are the rack's power feed and coolant loop
	// ("" unknown): set with SetRackPlacement, expected-rack files and the
	// admin API (docs/operations.md "Feeds, loops and power budgets").
	PowerFeed   string
	CoolantLoop string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	DeletedAt   *time.Time
}

// Component is a rack component as held in the inventory.
type Component struct {
	ID              uuid.UUID
	RackID          *uuid.UUID // nil for a rack-less component
	Type            ComponentType
	Name            string
	Manufacturer    string
	SerialNumber    string
	Model           *string
	Description     *string
	FirmwareVersion string
	Position        Position
	BMCs            []BMC
	// ExternalID is the component's ID in its source system (for compute
	// trays, the NICo machine ID); wire field component_id.
	ExternalID     string
	NVLDomainID    *uuid.UUID // the rack's domain
	RackExternalID string
	// NVLDomainExternalID is the external ID of the rack's domain ("" none).
	NVLDomainExternalID string
	// Status is Flow's operability view of the component: disruptive
	// operations whose type it lists as blocked wait at the readiness gate.
	Status OperationStatus
	// PowerState is Core's power as last synced ("on", "off"…; "" never
	// synced); Health is Core's last health report as JSON (nil: none).
	PowerState string
	Health     []byte
	TaskStats  TaskStats
	// LeakStatus is what leak detection last saw; LeakHandling how far
	// the reaction to a leak on the component has got.
	LeakStatus   LeakStatus
	LeakHandling LeakHandling
	CreatedAt    time.Time
	UpdatedAt    time.Time
	DeletedAt    *time.Time
}

// OperationStatus is a component's operability (ComponentOperationStatus):
// its phase ("unknown", "initializing", "ready", "in_use", "error",
// "deleting"), why, and the operation types ("power_control",
// "firmware_control", …) Flow refuses while it lasts.
type OperationStatus struct {
	Phase   string
	Reason  string
	Blocked []string
}

// NVLDomain is an NVLink domain: a named group of racks.
type NVLDomain struct {
	ID   uuid.UUID
	Name string // empty for unnamed domains discovered from Core
	// ExternalID is Core's rack-group ID ("" none); NMXCClusterID the
	// NMX-C cluster the group's switches report (nil none).
	ExternalID    string
	NMXCClusterID *uuid.UUID
}

// NVLinkDomain is the read model of a domain with an external ID
// (GetNVLinkDomain): the domain and its live member racks, ordered by UUID,
// with their components when asked for.
type NVLinkDomain struct {
	NVLDomain
	Racks []Rack
}

// Topology reports the topology the member racks' profiles share: each
// profile loses a trailing "_NO_POWERSHELF", then one vendor suffix
// ("_WIWYNN", "_LENOVO", "_SMC" or "_NVIDIA", checked in that order); the
// result is set only when every member yields the same non-empty value.
func (d NVLinkDomain) Topology() (string, bool) {
	topology := ""
	for i, r := range d.Racks {
		t := rackTopology(r.ProfileID)
		if t == "" || (i > 0 && t != topology) {
			return "", false
		}
		topology = t
	}
	return topology, topology != ""
}

func rackTopology(profile string) string {
	p := strings.TrimSuffix(profile, "_NO_POWERSHELF")
	for _, vendor := range []string{"_WIWYNN", "_LENOVO", "_SMC", "_NVIDIA"} {
		if t, ok := strings.CutSuffix(p, vendor); ok {
			return t
		}
	}
	return ""
}

// Phase aggregates the member racks' phases as a rack's phase aggregates
// its components' (RackPhase); "unknown" without members.
func (d NVLinkDomain) Phase() string {
	phases := make([]string, len(d.Racks))
	for i, r := range d.Racks {
		phases[i] = r.OperationPhase
	}
	return RackPhase(phases)
}

// StringQuery is a set of string patterns (wire StringQueryInfo). Exact
// patterns compare for equality; Wildcard patterns use SQL LIKE syntax ('%'
// any run, '_' one character), with '*' and '?' accepted as aliases, and a
// wildcard pattern without any wildcard character matches as a substring.
// AnyOf combines patterns with OR; otherwise all patterns must match.
// Manufacturer queries ignore case.
type StringQuery struct {
	Patterns []string
	Wildcard bool
	AnyOf    bool
}

// Page is offset/limit paging. Limit 0 means DefaultPageLimit.
type Page struct {
	Offset, Limit int32
}

// Paging limits.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// DefaultNVLDomainPageLimit is GetListOfNVLDomains' page size when none
	// is given (upstream's default).
	DefaultNVLDomainPageLimit = 1000
)

// RackRef identifies a rack by exactly one of UUID, name or external ID.
type RackRef struct {
	ID         uuid.UUID
	Name       string
	ExternalID string
}

// String names the identifier for messages, e.g. `rack name "g10"`.
func (r RackRef) String() string {
	switch {
	case r.ID != uuid.Nil:
		return "rack " + r.ID.String()
	case r.ExternalID != "":
		return fmt.Sprintf("rack external id %q", r.ExternalID)
	}
	return fmt.Sprintf("rack name %q", r.Name)
}

// ComponentRef identifies a component by UUID or by external reference: an
// external ID (matched against Component.ExternalID and, when it parses as
// a MAC address, against the normalised BMC MACs) optionally qualified by
// type.
type ComponentRef struct {
	ID           uuid.UUID
	ExternalType ComponentType // empty: any type
	ExternalID   string
}

// String names the identifier for messages, e.g. `component identifier "m1"`.
func (r ComponentRef) String() string {
	if r.ID != uuid.Nil {
		return "component " + r.ID.String()
	}
	if r.ExternalType != "" {
		return fmt.Sprintf("component identifier %q (type %s)", r.ExternalID, r.ExternalType)
	}
	return fmt.Sprintf("component identifier %q", r.ExternalID)
}

// NVLDomainRef identifies an NVLink domain by UUID or name (UUID wins).
type NVLDomainRef struct {
	ID         uuid.UUID
	Name       string
	ExternalID string // Core's rack-group ID, when given instead
}

// String names the identifier for messages, e.g. `nvl domain name "d1"`.
func (r NVLDomainRef) String() string {
	if r.ID != uuid.Nil {
		return "nvl domain " + r.ID.String()
	}
	if r.ExternalID != "" {
		return fmt.Sprintf("nvl domain external id %q", r.ExternalID)
	}
	return fmt.Sprintf("nvl domain name %q", r.Name)
}

// TargetSpec selects what an operation acts on (wire OperationTargetSpec):
// exactly one of its lists is non-empty.
type TargetSpec struct {
	Racks      []RackTarget
	NVLDomains []NVLDomainTarget
	Components []ComponentRef
}

// RackTarget selects a rack, optionally narrowed to some component types
// (empty: every component).
type RackTarget struct {
	Rack  RackRef
	Types []ComponentType
}

// NVLDomainTarget selects every rack currently in a domain, optionally
// narrowed to some component types.
type NVLDomainTarget struct {
	Domain NVLDomainRef
	Types  []ComponentType
}

// ScopeRack is one live rack of ResolveInventory's scope: what planning
// over it uses (name and location), and the IDs and types of its chosen
// live components.
type ScopeRack struct {
	ID       uuid.UUID
	Name     string
	Location Location
	// Components are ordered by name then UUID, as a Selection's.
	Components []ScopeComponent
}

// ScopeComponent is one component of a ScopeRack.
type ScopeComponent struct {
	ID   uuid.UUID
	Type ComponentType
}

// Selection is one rack of a resolved TargetSpec with the components chosen
// on it.
type Selection struct {
	Rack Rack
	// Types is the union of the type filters that selected the rack; nil
	// when some target took the whole rack or components were named one by
	// one.
	Types []ComponentType
	// Components are the chosen live components (BMCs included), ordered by
	// name then UUID.
	Components []Component
}
