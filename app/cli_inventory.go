package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI nouns of the inventory: rack, component, nvl-domain.

func uuidArg(s string) (*flowv1.UUID, error) {
	if _, err := uuid.Parse(s); err != nil {
		return nil, usageError{fmt.Errorf("%q is not a UUID", s)}
	}
	return &flowv1.UUID{Id: s}, nil
}

// pageFlags declares --offset and --limit.
func pageFlags(fs *flag.FlagSet) func() *flowv1.Pagination {
	offset := fs.Int("offset", 0, "skip this many results")
	limit := fs.Int("limit", 0, "return at most this many results (server default when 0)")
	return func() *flowv1.Pagination {
		if *offset == 0 && *limit == 0 {
			return nil
		}
		return &flowv1.Pagination{Offset: int32(*offset), Limit: int32(*limit)}
	}
}

var rackNoun = cliNoun{
	name:    "rack",
	summary: "racks of the inventory",
	verbs: []cliVerb{
		{name: "create", args: "-f FILE", summary: "register an expected rack from CreateExpectedRack JSON ({\"rack\": {...}} or the rack itself; - for stdin)",
			flags: func(fs *flag.FlagSet) runFunc {
				file := fs.String("f", "", "JSON file (- for stdin)")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{fmt.Errorf("want -f FILE")}
					}
					req := &flowv1.CreateExpectedRackRequest{}
					if err := readProtoJSON(*file, req); err != nil || req.Rack == nil {
						rack := &flowv1.Rack{}
						if err2 := readProtoJSON(*file, rack); err2 != nil {
							if err != nil {
								return err
							}
							return err2
						}
						req.Rack = rack
					}
					res, err := c.client.CreateExpectedRack(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.GetId().GetId()) })
				}
			}},
		{name: "list", args: "[--name P] [--manufacturer P] [--model P] [--wildcard] [--order F] [--desc] [--offset N] [--limit N] [--components]", summary: "list racks (patterns are comma-separated, any may match)",
			flags: func(fs *flag.FlagSet) runFunc {
				name := fs.String("name", "", "rack name(s)")
				manu := fs.String("manufacturer", "", "manufacturer(s), case-insensitive")
				model := fs.String("model", "", "model(s)")
				wild := fs.Bool("wildcard", false, "patterns are wildcards (* and ?; no wildcard = substring)")
				order := fs.String("order", "name", "order by name, manufacturer or model")
				desc := fs.Bool("desc", false, "descending order")
				comps := fs.Bool("components", false, "include components")
				page := pageFlags(fs)
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.GetListOfRacksRequest{WithComponents: *comps, Pagination: page()}
					for field, v := range map[flowv1.RackFilterField]string{
						flowv1.RackFilterField_RACK_FILTER_FIELD_NAME:         *name,
						flowv1.RackFilterField_RACK_FILTER_FIELD_MANUFACTURER: *manu,
						flowv1.RackFilterField_RACK_FILTER_FIELD_MODEL:        *model,
					} {
						if v != "" {
							req.Filters = append(req.Filters, &flowv1.Filter{Field: &flowv1.Filter_RackField{RackField: field}, QueryInfo: stringQuery(v, *wild)})
						}
					}
					f, ok := flowv1.RackOrderByField_value["RACK_ORDER_BY_FIELD_"+strings.ToUpper(*order)]
					if !ok {
						return usageError{fmt.Errorf("--order must be name, manufacturer or model")}
					}
					req.OrderBy = &flowv1.OrderBy{Field: &flowv1.OrderBy_RackField{RackField: flowv1.RackOrderByField(f)}, Direction: direction(*desc)}
					res, err := c.client.GetListOfRacks(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printRacks(w, res.GetRacks())
						fmt.Fprintf(w, "(%d of %d racks)\n", len(res.GetRacks()), res.GetTotal())
					})
				}
			}},
		{name: "get", args: "ID | --manufacturer M --serial S  [--components]", summary: "show one rack",
			flags: func(fs *flag.FlagSet) runFunc {
				manu := fs.String("manufacturer", "", "manufacturer (with --serial; case-insensitive)")
				serial := fs.String("serial", "", "serial number")
				comps := fs.Bool("components", false, "include components")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					var res *flowv1.GetRackInfoResponse
					var err error
					switch {
					case len(args) == 1 && *serial == "":
						id, uerr := uuidArg(args[0])
						if uerr != nil {
							return uerr
						}
						res, err = c.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: id, WithComponents: *comps})
					case len(args) == 0 && *serial != "":
						res, err = c.client.GetRackInfoBySerial(ctx, &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: *manu, SerialNumber: *serial}, WithComponents: *comps})
					default:
						return usageError{fmt.Errorf("want ID or --manufacturer M --serial S")}
					}
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printRacks(w, []*flowv1.Rack{res.GetRack()})
						if len(res.GetRack().GetComponents()) > 0 {
							fmt.Fprintln(w)
							printComponents(w, res.GetRack().GetComponents())
						}
					})
				}
			}},
		{name: "patch", args: "ID [--name N] [--model M] [--description D] [--region R] [--datacenter D] [--room R] [--position P] [--external-id E] | -f FILE", summary: "change a rack (-f: PatchRack JSON, the rack message)",
			flags: func(fs *flag.FlagSet) runFunc {
				file := fs.String("f", "", "PatchRack JSON file: the Rack to patch (- for stdin)")
				name := fs.String("name", "", "new name")
				model := fs.String("model", "", "new model")
				descr := fs.String("description", "", "new description")
				region := fs.String("region", "", "new location region")
				dc := fs.String("datacenter", "", "new location datacenter")
				room := fs.String("room", "", "new location room")
				pos := fs.String("position", "", "new location position")
				ext := fs.String("external-id", "", "new external ID")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					rack := &flowv1.Rack{}
					if *file != "" {
						if len(args) > 0 {
							return usageError{fmt.Errorf("want either ID and flags or -f FILE")}
						}
						if err := readProtoJSON(*file, rack); err != nil {
							return err
						}
					} else {
						if err := wantArgs(args, 1, "ID"); err != nil {
							return err
						}
						id, err := uuidArg(args[0])
						if err != nil {
							return err
						}
						rack.Info = &flowv1.DeviceInfo{Id: id, Name: *name}
						if *model != "" {
							rack.Info.Model = model
						}
						if *descr != "" {
							rack.Info.Description = descr
						}
						rack.Location = &flowv1.Location{Region: *region, Datacenter: *dc, Room: *room, Position: *pos}
						rack.ExternalId = *ext
					}
					res, err := c.client.PatchRack(ctx, &flowv1.PatchRackRequest{Rack: rack})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.GetReport()) })
				}
			}},
		idVerb("delete", "soft-delete a rack and its components", "deleted rack", func(ctx context.Context, c *cliEnv, id *flowv1.UUID) (proto.Message, error) {
			return c.client.DeleteRack(ctx, &flowv1.DeleteRackRequest{Id: id})
		}),
		idVerb("purge", "permanently remove a soft-deleted rack", "purged rack", func(ctx context.Context, c *cliEnv, id *flowv1.UUID) (proto.Message, error) {
			return c.client.PurgeRack(ctx, &flowv1.PurgeRackRequest{Id: id})
		}),
	},
}

var componentNoun = cliNoun{
	name:    "component",
	summary: "rack components (compute trays, switch trays, power shelves, ...)",
	verbs: []cliVerb{
		{name: "list", args: "[--rack ID|NAME,...] [--type T,...] [--name P] [--manufacturer P] [--model P] [--wildcard] [--order F] [--desc] [--offset N] [--limit N]", summary: "list components",
			flags: func(fs *flag.FlagSet) runFunc {
				racks := fs.String("rack", "", "only these racks (UUIDs or names, comma-separated)")
				types := fs.String("type", "", "only these types: compute, nvswitch, powershelf, torswitch, ums, cdu")
				name := fs.String("name", "", "component name(s)")
				manu := fs.String("manufacturer", "", "manufacturer(s), case-insensitive")
				model := fs.String("model", "", "model(s)")
				wild := fs.Bool("wildcard", false, "name/manufacturer/model patterns are wildcards")
				order := fs.String("order", "name", "order by name, manufacturer, model or type")
				desc := fs.Bool("desc", false, "descending order")
				page := pageFlags(fs)
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.GetComponentsRequest{Pagination: page()}
					if *racks != "" {
						req.TargetSpec = rackListSpec(*racks)
					}
					if *types != "" {
						req.Filters = append(req.Filters, componentTypeFilter(*types))
					}
					for field, v := range map[flowv1.ComponentFilterField]string{
						flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_NAME:         *name,
						flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_MANUFACTURER: *manu,
						flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_MODEL:        *model,
					} {
						if v != "" {
							req.Filters = append(req.Filters, &flowv1.Filter{Field: &flowv1.Filter_ComponentField{ComponentField: field}, QueryInfo: stringQuery(v, *wild)})
						}
					}
					f, ok := flowv1.ComponentOrderByField_value["COMPONENT_ORDER_BY_FIELD_"+strings.ToUpper(*order)]
					if !ok {
						return usageError{fmt.Errorf("--order must be name, manufacturer, model or type")}
					}
					req.OrderBy = &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: flowv1.ComponentOrderByField(f)}, Direction: direction(*desc)}
					res, err := c.client.GetComponents(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printComponents(w, res.GetComponents())
						fmt.Fprintf(w, "(%d of %d components)\n", len(res.GetComponents()), res.GetTotal())
					})
				}
			}},
		componentValidateVerb, // cli_validate.go
		{name: "get", args: "ID | --manufacturer M --serial S  [--rack]", summary: "show one component (serial look-ups ignore the manufacturer's case)",
			flags: func(fs *flag.FlagSet) runFunc {
				manu := fs.String("manufacturer", "", "manufacturer (with --serial)")
				serial := fs.String("serial", "", "serial number")
				withRack := fs.Bool("rack", false, "include the component's rack")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					var res *flowv1.GetComponentInfoResponse
					var err error
					switch {
					case len(args) == 1 && *serial == "":
						id, uerr := uuidArg(args[0])
						if uerr != nil {
							return uerr
						}
						res, err = c.client.GetComponentInfoByID(ctx, &flowv1.GetComponentInfoByIDRequest{Id: id, WithRack: *withRack})
					case len(args) == 0 && *serial != "":
						res, err = c.client.GetComponentInfoBySerial(ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: *manu, SerialNumber: *serial}, WithRack: *withRack})
					default:
						return usageError{fmt.Errorf("want ID or --manufacturer M --serial S")}
					}
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printComponents(w, []*flowv1.Component{res.GetComponent()})
						if res.GetRack() != nil {
							fmt.Fprintln(w)
							printRacks(w, []*flowv1.Rack{res.GetRack()})
						}
					})
				}
			}},
		{name: "add", args: "-f FILE", summary: "add a component from Component JSON (rack_id optional; - for stdin)",
			flags: func(fs *flag.FlagSet) runFunc {
				file := fs.String("f", "", "Component JSON file (- for stdin)")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{fmt.Errorf("want -f FILE")}
					}
					comp := &flowv1.Component{}
					if err := readProtoJSON(*file, comp); err != nil {
						return err
					}
					res, err := c.client.AddComponent(ctx, &flowv1.AddComponentRequest{Component: comp})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printComponents(w, []*flowv1.Component{res.GetComponent()}) })
				}
			}},
		{name: "patch", args: "ID [--firmware V] [--slot N] [--tray N] [--host N] [--description JSON] [--move-to RACK-ID] | -f FILE", summary: "change a component; only the position coordinates given change (-f: PatchComponent JSON)",
			flags: func(fs *flag.FlagSet) runFunc {
				file := fs.String("f", "", "PatchComponentRequest JSON file (- for stdin)")
				fw := fs.String("firmware", "", "new firmware version")
				descr := fs.String("description", "", "new description (a JSON string)")
				moveTo := fs.String("move-to", "", "UUID of the rack to move the component to")
				var coords = map[string]*string{"slot": new(string), "tray": new(string), "host": new(string)}
				for _, k := range sortedKeys(coords) {
					fs.StringVar(coords[k], k, "", "new position "+k)
				}
				return func(ctx context.Context, c *cliEnv, args []string) error {
					req := &flowv1.PatchComponentRequest{}
					if *file != "" {
						if len(args) > 0 {
							return usageError{fmt.Errorf("want either ID and flags or -f FILE")}
						}
						if err := readProtoJSON(*file, req); err != nil {
							return err
						}
					} else {
						if err := wantArgs(args, 1, "ID"); err != nil {
							return err
						}
						id, err := uuidArg(args[0])
						if err != nil {
							return err
						}
						req.Id = id
						if *fw != "" {
							req.FirmwareVersion = fw
						}
						if *descr != "" {
							req.Description = descr
						}
						if *moveTo != "" {
							rid, err := uuidArg(*moveTo)
							if err != nil {
								return err
							}
							req.RackId = rid
						}
						paths := map[string]string{"slot": "position.slot_id", "tray": "position.tray_idx", "host": "position.host_id"}
						for _, k := range sortedKeys(coords) {
							if *coords[k] == "" {
								continue
							}
							n, err := strconv.ParseInt(*coords[k], 10, 32)
							if err != nil {
								return usageError{fmt.Errorf("--%s: %w", k, err)}
							}
							if req.Position == nil {
								req.Position = &flowv1.RackPosition{}
								req.UpdateMask = &fieldmaskpb.FieldMask{}
							}
							switch k {
							case "slot":
								req.Position.SlotId = int32(n)
							case "tray":
								req.Position.TrayIdx = int32(n)
							case "host":
								req.Position.HostId = int32(n)
							}
							req.UpdateMask.Paths = append(req.UpdateMask.Paths, paths[k])
						}
					}
					res, err := c.client.PatchComponent(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printComponents(w, []*flowv1.Component{res.GetComponent()}) })
				}
			}},
		idVerb("delete", "soft-delete a component", "deleted component", func(ctx context.Context, c *cliEnv, id *flowv1.UUID) (proto.Message, error) {
			return c.client.DeleteComponent(ctx, &flowv1.DeleteComponentRequest{Id: id})
		}),
		idVerb("purge", "permanently remove a soft-deleted component", "purged component", func(ctx context.Context, c *cliEnv, id *flowv1.UUID) (proto.Message, error) {
			return c.client.PurgeComponent(ctx, &flowv1.PurgeComponentRequest{Id: id})
		}),
	},
}

var nvlDomainNoun = cliNoun{
	name:    "nvl-domain",
	summary: "NVLink domains (groups of racks)",
	verbs: []cliVerb{
		{name: "create", args: "NAME [--id UUID]", summary: "create a domain (returns the existing one's UUID if the name is taken)",
			flags: func(fs *flag.FlagSet) runFunc {
				id := fs.String("id", "", "UUID to give the domain")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					ident := &flowv1.Identifier{Name: args[0]}
					if *id != "" {
						u, err := uuidArg(*id)
						if err != nil {
							return err
						}
						ident.Id = u
					}
					res, err := c.client.CreateNVLDomain(ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: ident}})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.GetId().GetId()) })
				}
			}},
		{name: "attach", args: "DOMAIN RACK...", summary: "attach racks (UUIDs or names) to a domain (UUID or name)",
			flags: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if len(args) < 2 {
						return usageError{fmt.Errorf("want DOMAIN RACK...")}
					}
					req := &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: identifier(args[0])}
					for _, r := range args[1:] {
						req.RackIdentifiers = append(req.RackIdentifiers, identifier(r))
					}
					res, err := c.client.AttachRacksToNVLDomain(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "attached %d rack(s) to %s\n", len(args)-1, args[0]) })
				}
			}},
		{name: "detach", args: "RACK...", summary: "detach racks (UUIDs or names) from their domain",
			flags: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if len(args) == 0 {
						return usageError{fmt.Errorf("want RACK...")}
					}
					req := &flowv1.DetachRacksFromNVLDomainRequest{}
					for _, r := range args {
						req.RackIdentifiers = append(req.RackIdentifiers, identifier(r))
					}
					res, err := c.client.DetachRacksFromNVLDomain(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "detached %d rack(s)\n", len(args)) })
				}
			}},
		{name: "list", args: "[--name P] [--wildcard] [--offset N] [--limit N]", summary: "list domains",
			flags: func(fs *flag.FlagSet) runFunc {
				name := fs.String("name", "", "domain name(s), comma-separated")
				wild := fs.Bool("wildcard", false, "patterns are wildcards")
				page := pageFlags(fs)
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.GetListOfNVLDomainsRequest{Pagination: page()}
					if *name != "" {
						req.Info = stringQuery(*name, *wild)
					}
					res, err := c.client.GetListOfNVLDomains(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						rows := make([][]string, len(res.GetNvlDomains()))
						for i, d := range res.GetNvlDomains() {
							rows[i] = []string{d.GetIdentifier().GetId().GetId(), d.GetIdentifier().GetName()}
						}
						printTable(w, []string{"ID", "NAME"}, rows)
						fmt.Fprintf(w, "(%d of %d domains)\n", len(rows), res.GetTotal())
					})
				}
			}},
		{name: "racks", args: "DOMAIN", summary: "list the racks of a domain (UUID or name)",
			flags: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 1, "DOMAIN"); err != nil {
						return err
					}
					res, err := c.client.GetRacksForNVLDomain(ctx, &flowv1.GetRacksForNVLDomainRequest{NvlDomainIdentifier: identifier(args[0])})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printRacks(w, res.GetRacks()) })
				}
			}},
	},
}

// rackListSpec targets the racks of a --rack list: comma-separated UUIDs or
// names.
func rackListSpec(list string) *flowv1.OperationTargetSpec {
	var ts []*flowv1.RackTarget
	for _, r := range strings.Split(list, ",") {
		if _, err := uuid.Parse(r); err == nil {
			ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Id{Id: &flowv1.UUID{Id: r}}})
		} else {
			ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: r}})
		}
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
}

// componentTypeFilter matches any type of a --type list: comma-separated
// lowercase type names (compute, nvswitch, ...).
func componentTypeFilter(list string) *flowv1.Filter {
	var names []string
	for _, t := range strings.Split(list, ",") {
		names = append(names, "COMPONENT_TYPE_"+strings.ToUpper(t))
	}
	return &flowv1.Filter{Field: &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_TYPE}, QueryInfo: &flowv1.StringQueryInfo{Patterns: names, UseOr: true}}
}

func direction(desc bool) string {
	if desc {
		return "DESC"
	}
	return "ASC"
}

func printRacks(w io.Writer, racks []*flowv1.Rack) {
	rows := make([][]string, len(racks))
	for i, r := range racks {
		l := r.GetLocation()
		var domains []string
		for _, d := range r.GetNvlDomainIds() {
			domains = append(domains, d.GetId())
		}
		comps := "-"
		if n := len(r.GetComponents()); n > 0 {
			comps = strconv.Itoa(n)
		}
		rows[i] = []string{
			r.GetInfo().GetId().GetId(), r.GetInfo().GetName(), r.GetInfo().GetManufacturer(), r.GetInfo().GetSerialNumber(),
			r.GetInfo().GetModel(), strings.Trim(strings.Join([]string{l.GetRegion(), l.GetDatacenter(), l.GetRoom(), l.GetPosition()}, "/"), "/"),
			comps, strings.Join(domains, ","),
		}
	}
	printTable(w, []string{"ID", "NAME", "MANUFACTURER", "SERIAL", "MODEL", "LOCATION", "COMPONENTS", "NVL DOMAIN"}, rows)
}

func printComponents(w io.Writer, comps []*flowv1.Component) {
	rows := make([][]string, len(comps))
	for i, c := range comps {
		var bmcs []string
		for _, b := range c.GetBmcs() {
			kind := strings.ToLower(strings.TrimPrefix(b.GetType().String(), "BMC_TYPE_"))
			bmcs = append(bmcs, kind+"="+b.GetMacAddress())
		}
		p := c.GetPosition()
		rows[i] = []string{
			c.GetInfo().GetId().GetId(), strings.ToLower(strings.TrimPrefix(c.GetType().String(), "COMPONENT_TYPE_")),
			c.GetInfo().GetName(), c.GetInfo().GetManufacturer(), c.GetInfo().GetSerialNumber(), c.GetFirmwareVersion(),
			fmt.Sprintf("%d/%d/%d", p.GetSlotId(), p.GetTrayIdx(), p.GetHostId()), strings.Join(bmcs, " "), c.GetRackId().GetId(),
		}
	}
	printTable(w, []string{"ID", "TYPE", "NAME", "MANUFACTURER", "SERIAL", "FIRMWARE", "SLOT/TRAY/HOST", "BMCS", "RACK"}, rows)
}

// idVerb is a verb that takes one UUID, makes one call and reports what it
// did ("deleted rack <id>").
func idVerb(name, summary, done string, call func(context.Context, *cliEnv, *flowv1.UUID) (proto.Message, error)) cliVerb {
	return cliVerb{name: name, args: "ID", summary: summary,
		flags: func(fs *flag.FlagSet) runFunc {
			return func(ctx context.Context, c *cliEnv, args []string) error {
				if err := wantArgs(args, 1, "ID"); err != nil {
					return err
				}
				id, err := uuidArg(args[0])
				if err != nil {
					return err
				}
				res, err := call(ctx, c, id)
				if err != nil {
					return err
				}
				return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", done, id.GetId()) })
			}
		}}
}
