package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

var nvlDomainNoun = noun{
	name:    "nvl-domain",
	summary: "NVLink domains (groups of racks)",
	verbs: []verb{
		{name: "create", args: "NAME [--id UUID]", summary: "create a domain (returns the existing one's UUID if the name is taken)",
			flags: func(fs *pflag.FlagSet) runFunc {
				id := fs.String("id", "", "UUID to give the domain")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					ident := &flowv1.Identifier{Name: args[0]}
					if *id != "" {
						u, err := uuidValue("--id", *id)
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
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
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
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
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
			flags: func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "domain name(s), comma-separated")
				wild := fs.Bool("wildcard", false, "patterns are wildcards")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
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
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "DOMAIN"); err != nil {
						return err
					}
					res, err := c.client.GetRacksForNVLDomain(ctx, &flowv1.GetRacksForNVLDomainRequest{NvlDomainIdentifier: identifier(args[0])})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { c.printRacks(ctx, w, res.GetRacks(), false) })
				}
			}},
	},
}
