package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun component: the components of racks (compute trays, switch trays, power shelves, ...).

var componentNoun = noun{
	name:    "component",
	summary: "rack components (compute trays, switch trays, power shelves, ...)",
	verbs: []verb{
		{name: "list", args: "[--rack ID|NAME,...] [--type T,...] [--name P] [--manufacturer P] [--model P] [--wildcard] [--order F] [--desc] [--offset N] [--limit N]", summary: "list components",
			flags: func(fs *pflag.FlagSet) runFunc {
				racks := fs.String("rack", "", "only these racks (UUIDs or names, comma-separated)")
				types := fs.String("type", "", "only these types: compute, nvswitch, powershelf, torswitch, ums, cdu")
				name := fs.String("name", "", "component name(s)")
				manu := fs.String("manufacturer", "", "manufacturer(s), case-insensitive")
				model := fs.String("model", "", "model(s)")
				wild := fs.Bool("wildcard", false, "name/manufacturer/model patterns are wildcards")
				order := fs.String("order", "name", "order by name, manufacturer, model or type")
				desc := fs.Bool("desc", false, "descending order")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.GetComponentsRequest{Pagination: page()}
					if *racks != "" {
						req.TargetSpec = rackListSpec(*racks)
					}
					if *types != "" {
						f, err := componentTypeFilter(*types)
						if err != nil {
							return err
						}
						req.Filters = append(req.Filters, f)
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
						c.printComponents(ctx, w, res.GetComponents())
						fmt.Fprintf(w, "(%d of %d components)\n", len(res.GetComponents()), res.GetTotal())
					})
				}
			}},
		componentValidateVerb, // cli_validate.go
		{name: "get", complete: componentNameList, args: "COMPONENT | --manufacturer M --serial S  [--rack]", summary: "show one component and its installed firmware per sub-component (serial look-ups ignore the manufacturer's case)",
			flags: func(fs *pflag.FlagSet) runFunc {
				manu := fs.String("manufacturer", "", "manufacturer (with --serial)")
				serial := fs.String("serial", "", "serial number")
				withRack := fs.Bool("rack", false, "include the component's rack")
				return func(ctx context.Context, c *env, args []string) error {
					var res *flowv1.GetComponentInfoResponse
					var err error
					switch {
					case len(args) == 1 && *serial == "":
						id, uerr := resolveComponent(ctx, c, args[0])
						if uerr != nil {
							return uerr
						}
						res, err = c.client.GetComponentInfoByID(ctx, &flowv1.GetComponentInfoByIDRequest{Id: id, WithRack: *withRack})
					case len(args) == 0 && *serial != "":
						res, err = c.client.GetComponentInfoBySerial(ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: *manu, SerialNumber: *serial}, WithRack: *withRack})
					default:
						return usageError{fmt.Errorf("want COMPONENT or --manufacturer M --serial S")}
					}
					if err != nil {
						return err
					}
					var installed *adminv1.GetInstalledFirmwareResponse
					if !c.structured() {
						if installed, err = c.installedFirmware(ctx, res.GetComponent().GetInfo().GetId().GetId()); err != nil {
							return err
						}
					}
					return c.emit(res, func(w io.Writer) {
						c.printComponents(ctx, w, []*flowv1.Component{res.GetComponent()})
						printInstalledFirmware(w, installed)
						if res.GetRack() != nil {
							fmt.Fprintln(w)
							c.printRacks(ctx, w, []*flowv1.Rack{res.GetRack()}, len(res.GetRack().GetComponents()) > 0)
						}
					})
				}
			}},
		{name: "add", args: "-f FILE", summary: "add a component from Component JSON (rack_id optional; - for stdin)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "Component JSON file (- for stdin)")
				return func(ctx context.Context, c *env, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{fmt.Errorf("want -f FILE")}
					}
					comp := &flowv1.Component{}
					if err := c.readProtoJSON(*file, comp); err != nil {
						return err
					}
					res, err := c.client.AddComponent(ctx, &flowv1.AddComponentRequest{Component: comp})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { c.printComponents(ctx, w, []*flowv1.Component{res.GetComponent()}) })
				}
			}},
		{name: "patch", complete: componentNameList, args: "COMPONENT [--firmware V] [--slot N] [--tray N] [--host N] [--description JSON] [--move-to RACK] | -f FILE", summary: "change a component; only the position coordinates given change (-f: PatchComponent JSON)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "PatchComponentRequest JSON file (- for stdin)")
				fw := fs.String("firmware", "", "new firmware version")
				descr := fs.String("description", "", "new description (plain text or a JSON document)")
				moveTo := fs.String("move-to", "", "the rack (name or UUID) to move the component to")
				var coords = map[string]*string{"slot": new(string), "tray": new(string), "host": new(string)}
				for _, k := range sortedKeys(coords) {
					fs.StringVar(coords[k], k, "", "new position "+k)
				}
				return func(ctx context.Context, c *env, args []string) error {
					req := &flowv1.PatchComponentRequest{}
					if *file != "" {
						if len(args) > 0 {
							return usageError{fmt.Errorf("want either COMPONENT and flags or -f FILE")}
						}
						if err := c.readProtoJSON(*file, req); err != nil {
							return err
						}
					} else {
						if err := wantArgs(args, 1, "COMPONENT"); err != nil {
							return err
						}
						id, err := resolveComponent(ctx, c, args[0])
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
							rid, err := resolveRack(ctx, c, *moveTo)
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
					return c.emit(res, func(w io.Writer) { c.printComponents(ctx, w, []*flowv1.Component{res.GetComponent()}) })
				}
			}},
		idVerb("delete", "COMPONENT", "soft-delete a component", "deleted component", resolveComponent, componentNameList, func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
			return c.client.DeleteComponent(ctx, &flowv1.DeleteComponentRequest{Id: id})
		}),
		idVerb("purge", "COMPONENT", "permanently remove a soft-deleted component", "purged component", resolveComponent, componentNameList, func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
			return c.client.PurgeComponent(ctx, &flowv1.PurgeComponentRequest{Id: id})
		}),
	},
}

// parseComponentType parses a component type as the CLI takes it: the
// lowercase name (nvswitch), the enum name (COMPONENT_TYPE_NVSWITCH), any
// case.
func parseComponentType(s string) (flowv1.ComponentType, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	v, ok := flowv1.ComponentType_value["COMPONENT_TYPE_"+strings.TrimPrefix(s, "COMPONENT_TYPE_")]
	return flowv1.ComponentType(v), ok && v != 0
}

// componentTypeName returns the lowercase name of a wire component type
// ("nvswitch").
func componentTypeName(t flowv1.ComponentType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "COMPONENT_TYPE_"))
}

// componentTypeFilter matches any type of a --type list: comma-separated
// type names (compute, nvswitch, ...). An unknown name is a usage error
// listing the valid ones, not a filter that silently matches nothing.
func componentTypeFilter(list string) (*flowv1.Filter, error) {
	var names []string
	for _, t := range splitList(list) {
		ct, ok := parseComponentType(t)
		if !ok {
			return nil, usageError{fmt.Errorf("--type: unknown component type %q (want %s)", t, strings.Join(componentTypeNames(), ", "))}
		}
		names = append(names, ct.String())
	}
	return &flowv1.Filter{Field: &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_TYPE}, QueryInfo: &flowv1.StringQueryInfo{Patterns: names, UseOr: true}}, nil
}

// componentTypeNames are the component types the CLI takes, lowercase,
// in the wire enum's order.
func componentTypeNames() []string {
	var out []string
	for v := range int32(len(flowv1.ComponentType_name)) {
		if v != 0 {
			out = append(out, componentTypeName(flowv1.ComponentType(v)))
		}
	}
	return out
}

func direction(desc bool) string {
	if desc {
		return "DESC"
	}
	return "ASC"
}

// printComponents prints a component table, the racks by name (-o wide:
// and by UUID).
// installedFirmware reads the component's installed firmware per
// sub-component (AdminService.GetInstalledFirmware); nil, and no error,
// from a server that does not serve it.
func (c *env) installedFirmware(ctx context.Context, id string) (*adminv1.GetInstalledFirmwareResponse, error) {
	res, err := c.admin.GetInstalledFirmware(ctx, &adminv1.GetInstalledFirmwareRequest{Component: id})
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return nil, nil
	}
	return res, err
}

// printInstalledFirmware prints a component's installed firmware: each
// sub-component with its versions (one per instance), and when Core last
// reported them. Nothing for nil.
func printInstalledFirmware(w io.Writer, res *adminv1.GetInstalledFirmwareResponse) {
	if res == nil {
		return
	}
	fmt.Fprintln(w)
	switch {
	case !res.GetKnown():
		fmt.Fprintln(w, "Installed firmware: never reported by NICo Core")
		return
	case res.GetReported():
		fmt.Fprintf(w, "Installed firmware (seen %s, changed %s):\n", localTime(res.GetSeenAt()), localTime(res.GetChangedAt()))
	default:
		fmt.Fprintf(w, "Installed firmware: not reported by NICo Core since %s; last seen:\n", localTime(res.GetSeenAt()))
	}
	rows := make([][]string, 0, len(res.GetComponents()))
	for _, sc := range res.GetComponents() {
		rows = append(rows, []string{sc.GetComponent(), strings.Join(sc.GetVersions(), ", ")})
	}
	printTable(w, []string{"SUB-COMPONENT", "VERSIONS"}, rows)
}

func (c *env) printComponents(ctx context.Context, w io.Writer, comps []*flowv1.Component) {
	racks := make([]string, len(comps))
	for i, comp := range comps {
		racks[i] = comp.GetRackId().GetId()
	}
	names := rackNamesByID(ctx, c, racks)
	wide := c.wide()
	rows := make([][]string, len(comps))
	for i, comp := range comps {
		var bmcs []string
		for _, b := range comp.GetBmcs() {
			kind := strings.ToLower(strings.TrimPrefix(b.GetType().String(), "BMC_TYPE_"))
			bmcs = append(bmcs, kind+"="+b.GetMacAddress())
		}
		p := comp.GetPosition()
		rows[i] = []string{
			comp.GetInfo().GetId().GetId(), strings.ToLower(strings.TrimPrefix(comp.GetType().String(), "COMPONENT_TYPE_")),
			comp.GetInfo().GetName(), comp.GetInfo().GetManufacturer(), comp.GetInfo().GetSerialNumber(), comp.GetFirmwareVersion(),
			fmt.Sprintf("%d/%d/%d", p.GetSlotId(), p.GetTrayIdx(), p.GetHostId()), strings.Join(bmcs, " "), rackLabel(names, comp.GetRackId().GetId()),
		}
		if wide {
			rows[i] = append(rows[i], comp.GetRackId().GetId(), comp.GetInfo().GetDescription())
		}
	}
	headers := []string{"ID", "TYPE", "NAME", "MANUFACTURER", "SERIAL", "FIRMWARE", "SLOT/TRAY/HOST", "BMCS", "RACK"}
	if wide {
		headers = append(headers, "RACK ID", "DESCRIPTION")
	}
	printTable(w, headers, rows)
}
