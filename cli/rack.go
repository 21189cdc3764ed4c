package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun rack: the racks of the inventory.

var rackNoun = noun{
	name:    "rack",
	summary: "racks of the inventory",
	verbs: []verb{
		{name: "create", args: "-f FILE", summary: "register an expected rack from CreateExpectedRack JSON ({\"rack\": {...}} or the rack itself), or from a rack file of upstream's CLI (snake_case, \"type\": \"compute\"); - for stdin",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "JSON file (- for stdin)")
				return func(ctx context.Context, c *env, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{fmt.Errorf("want -f FILE")}
					}
					data, err := c.readFileArg(*file)
					if err != nil {
						return err
					}
					data, place, err := splitPlacement(data)
					if err != nil {
						return fmt.Errorf("%s: %w", *file, err)
					}
					req, err := rackCreateRequest(data)
					if err != nil {
						return fmt.Errorf("%s: %w", *file, err)
					}
					res, err := c.client.CreateExpectedRack(ctx, req)
					if err != nil {
						return err
					}
					if place != nil {
						place.Rack = res.GetId().GetId()
						if _, err := c.admin.SetRackPlacement(ctx, place); err != nil {
							return fmt.Errorf("rack %s created, its feed and loop not set (flow rack set): %w", place.Rack, err)
						}
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.GetId().GetId()) })
				}
			}},
		{name: "list", args: "[--name P] [--manufacturer P] [--model P] [--wildcard] [--order F] [--desc] [--offset N] [--limit N] [--components]", summary: "list racks (patterns are comma-separated, any may match)",
			flags: func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "rack name(s)")
				manu := fs.String("manufacturer", "", "manufacturer(s), case-insensitive")
				model := fs.String("model", "", "model(s)")
				wild := fs.Bool("wildcard", false, "patterns are wildcards (* and ?; no wildcard = substring)")
				order := fs.String("order", "name", "order by name, manufacturer or model")
				desc := fs.Bool("desc", false, "descending order")
				comps := fs.Bool("components", false, "include components")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
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
						c.printRacks(ctx, w, res.GetRacks(), *comps)
						fmt.Fprintf(w, "(%d of %d racks)\n", len(res.GetRacks()), res.GetTotal())
					})
				}
			}},
		{name: "get", complete: rackNameList, args: "RACK | --manufacturer M --serial S  [--components]", summary: "show one rack",
			flags: func(fs *pflag.FlagSet) runFunc {
				manu := fs.String("manufacturer", "", "manufacturer (with --serial; case-insensitive)")
				serial := fs.String("serial", "", "serial number")
				comps := fs.Bool("components", false, "include components")
				return func(ctx context.Context, c *env, args []string) error {
					var res *flowv1.GetRackInfoResponse
					var err error
					switch {
					case len(args) == 1 && *serial == "":
						id, uerr := resolveRack(ctx, c, args[0])
						if uerr != nil {
							return uerr
						}
						res, err = c.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: id, WithComponents: *comps})
					case len(args) == 0 && *serial != "":
						res, err = c.client.GetRackInfoBySerial(ctx, &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: *manu, SerialNumber: *serial}, WithComponents: *comps})
					default:
						return usageError{fmt.Errorf("want RACK or --manufacturer M --serial S")}
					}
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						c.printRacks(ctx, w, []*flowv1.Rack{res.GetRack()}, *comps)
						if len(res.GetRack().GetComponents()) > 0 {
							fmt.Fprintln(w)
							c.printComponents(ctx, w, res.GetRack().GetComponents())
						}
					})
				}
			}},
		{name: "patch", complete: rackNameList, args: "RACK [--name N] [--model M] [--description D] [--region R] [--datacenter D] [--room R] [--position P] [--external-id E] | -f FILE", summary: "change a rack (-f: PatchRack JSON, the rack message)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "PatchRack JSON file: the Rack to patch (- for stdin)")
				name := fs.String("name", "", "new name")
				model := fs.String("model", "", "new model")
				descr := fs.String("description", "", "new description")
				region := fs.String("region", "", "new location region")
				dc := fs.String("datacenter", "", "new location datacenter")
				room := fs.String("room", "", "new location room")
				pos := fs.String("position", "", "new location position")
				ext := fs.String("external-id", "", "new external ID")
				return func(ctx context.Context, c *env, args []string) error {
					rack := &flowv1.Rack{}
					if *file != "" {
						if len(args) > 0 {
							return usageError{fmt.Errorf("want either RACK and flags or -f FILE")}
						}
						if err := c.readProtoJSON(*file, rack); err != nil {
							return err
						}
					} else {
						if err := wantArgs(args, 1, "RACK"); err != nil {
							return err
						}
						id, err := resolveRack(ctx, c, args[0])
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
		idVerb("delete", "RACK", "soft-delete a rack and its components", "deleted rack", resolveRack, rackNameList, func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
			return c.client.DeleteRack(ctx, &flowv1.DeleteRackRequest{Id: id})
		}),
		idVerb("purge", "RACK", "permanently remove a soft-deleted rack (its UUID, or the name it had)", "purged rack", resolveDeletedRack, rackNameList, func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
			return c.client.PurgeRack(ctx, &flowv1.PurgeRackRequest{Id: id})
		}),
	},
	subnouns: []noun{rackIsolationNoun},
}

// resolveDeletedRack turns the RACK argument of purge into a rack UUID: a
// UUID is used as is, anything else must be the name of exactly one
// soft-deleted rack, which v1.Flow's reads leave out, so Flow's admin
// service finds it (FindDeletedRacks). A name no deleted rack has is
// not_found, or failed_precondition when a live rack has it (delete it
// first); a name several deleted racks share is a usage error (exit 2)
// listing their UUIDs.
func resolveDeletedRack(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	res, err := c.admin.FindDeletedRacks(ctx, &adminv1.FindDeletedRacksRequest{Name: s})
	if err != nil {
		return nil, err
	}
	racks := res.GetRacks()
	switch len(racks) {
	case 0:
		live, err := liveRacksNamed(ctx, c, s)
		if err != nil {
			return nil, err
		}
		switch len(live) {
		case 0:
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no deleted rack is named %q (purge takes a rack that flow rack delete soft-deleted)", s))
		case 1:
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("rack %q (%s) is not deleted: delete it first (flow rack delete %s), then purge it", s, live[0].id, s))
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("no deleted rack is named %q; %d live racks are: delete one first (flow rack delete UUID), then purge it by UUID", s, len(live)))
	case 1:
		return &flowv1.UUID{Id: racks[0].GetId()}, nil
	}
	list := make([]string, len(racks))
	for i, r := range racks {
		list[i] = fmt.Sprintf("%s (%s/%s, deleted %s)", r.GetId(), r.GetManufacturer(), r.GetSerialNumber(),
			r.GetDeletedAt().AsTime().Local().Format(time.RFC3339))
	}
	return nil, usageError{fmt.Errorf("%d deleted racks are named %q: %s; pass the UUID of the one to purge (flow rack purge UUID)",
		len(racks), s, strings.Join(list, ", "))}
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

// printRacks prints a rack table, NVLink domains by name (-o wide: also by
// UUID, with external IDs and descriptions). The COMPONENTS column (a
// count) is there only when the racks were read with their components
// (--components): a listing without them would show every rack as empty.
func (c *env) printRacks(ctx context.Context, w io.Writer, racks []*flowv1.Rack, withComponents bool) {
	wide := c.wide()
	domainNames := c.domainNames(ctx, racks)
	rows := make([][]string, len(racks))
	for i, r := range racks {
		l := r.GetLocation()
		var domains, domainIDs []string
		for _, d := range r.GetNvlDomainIds() {
			domains = append(domains, or(domainNames[d.GetId()], d.GetId()))
			domainIDs = append(domainIDs, d.GetId())
		}
		comps := strconv.Itoa(len(r.GetComponents()))
		rows[i] = []string{
			r.GetInfo().GetId().GetId(), r.GetInfo().GetName(), r.GetInfo().GetManufacturer(), r.GetInfo().GetSerialNumber(),
			r.GetInfo().GetModel(), strings.Trim(strings.Join([]string{l.GetRegion(), l.GetDatacenter(), l.GetRoom(), l.GetPosition()}, "/"), "/"),
		}
		if withComponents {
			rows[i] = append(rows[i], comps)
		}
		rows[i] = append(rows[i], strings.Join(domains, ","))
		if wide {
			rows[i] = append(rows[i], strings.Join(domainIDs, ","), r.GetExternalId(), r.GetInfo().GetDescription())
		}
	}
	headers := []string{"ID", "NAME", "MANUFACTURER", "SERIAL", "MODEL", "LOCATION"}
	if withComponents {
		headers = append(headers, "COMPONENTS")
	}
	headers = append(headers, "NVL DOMAIN")
	if wide {
		headers = append(headers, "NVL DOMAIN ID", "EXTERNAL ID", "DESCRIPTION")
	}
	printTable(w, headers, rows)
}

// domainNames returns the names of the NVLink domains by UUID, when any of
// racks is in one (one call; on failure the domains show by UUID).
func (c *env) domainNames(ctx context.Context, racks []*flowv1.Rack) map[string]string {
	names := map[string]string{}
	for _, r := range racks {
		if len(r.GetNvlDomainIds()) == 0 {
			continue
		}
		res, err := c.client.GetListOfNVLDomains(ctx, &flowv1.GetListOfNVLDomainsRequest{Pagination: &flowv1.Pagination{Limit: pageLimit}})
		if err == nil {
			for _, d := range res.GetNvlDomains() {
				names[d.GetIdentifier().GetId().GetId()] = d.GetIdentifier().GetName()
			}
		}
		break
	}
	return names
}
