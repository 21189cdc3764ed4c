package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// webhookNoun is `flow webhook`: webhook subscriptions and their
// deliveries on Flow's admin service (docs/notifications.md).
var webhookNoun = noun{
	name:    "webhook",
	aliases: []string{"webhooks"},
	summary: "webhooks: endpoints Flow posts its events to (CloudEvents JSON, signed with HMAC-SHA256), and their deliveries (docs/notifications.md)",
	verbs: []verb{
		{name: "create", args: "--url URL --events TYPE,... [--secret S] [--rack R]... [--batch [--batch-max N] [--batch-max-bytes B]]",
			summary: "subscribe an endpoint to event types (flow.task.failed, ... or *), optionally for some racks only (operator); without --secret a random one is made and printed once",
			flags: func(fs *pflag.FlagSet) runFunc {
				url := fs.String("url", "", "the endpoint: https:// (http:// only under flow dev)")
				events := fs.StringSlice("events", nil, "event types, comma-separated, or * for all (docs/notifications.md lists them)")
				secret := fs.String("secret", "", "the signing secret (at least 16 characters); default: 32 random bytes, printed once")
				racks := fs.StringArray("rack", nil, "only events of this rack (name or UUID); repeatable")
				desc := fs.String("description", "", "what it is for")
				batch := fs.Bool("batch", false, "batched delivery: each request a CloudEvents JSON batch (application/cloudevents-batch+json) of several events")
				batchMax := fs.Int32("batch-max", 0, "with --batch: at most this many events a request (1-1000; default 100)")
				batchBytes := fs.Int32("batch-max-bytes", 0, "with --batch: at most this many bytes of body a request (1024 to 16 MiB; default 1 MiB; a larger event goes alone)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments (give --url and --events)"); err != nil {
						return err
					}
					made := false
					if !fs.Changed("secret") {
						b := make([]byte, 32)
						if _, err := rand.Read(b); err != nil {
							return err
						}
						*secret, made = base64.RawURLEncoding.EncodeToString(b), true
					}
					res, err := c.admin.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: *url, EventTypes: *events, Secret: *secret, Racks: *racks, Description: *desc,
						Batch: *batch, BatchMax: *batchMax, BatchMaxBytes: *batchBytes})
					if err != nil {
						return err
					}
					if made {
						// Flow never returns a secret: this is the only time it is shown.
						fmt.Fprintf(c.errOut, "signing secret (shown once, Flow never returns it): %s\n", *secret)
					}
					return c.emit(res, func(w io.Writer) { printWebhooks(w, []*adminv1.Webhook{res.GetWebhook()}) })
				}
			}},
		{name: "list", summary: "list the webhook subscriptions",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.ListWebhooks(ctx, &adminv1.ListWebhooksRequest{})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						if len(res.GetWebhooks()) == 0 {
							fmt.Fprintln(w, "no webhooks")
							return
						}
						printWebhooks(w, res.GetWebhooks())
					})
				}
			}},
		{name: "get", args: "ID", summary: "one webhook subscription",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ID"); err != nil {
						return err
					}
					res, err := c.admin.GetWebhook(ctx, &adminv1.GetWebhookRequest{Id: args[0]})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printWebhooks(w, []*adminv1.Webhook{res.GetWebhook()}) })
				}
			}},
		{name: "delete", args: "ID", summary: "delete a webhook subscription and its deliveries (operator)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ID"); err != nil {
						return err
					}
					res, err := c.admin.DeleteWebhook(ctx, &adminv1.DeleteWebhookRequest{Id: args[0]})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "deleted webhook %s (%s)\n", res.GetWebhook().GetId(), res.GetWebhook().GetUrl())
					})
				}
			}},
		{name: "test", args: "ID", summary: "send a flow.webhook.test event to one subscription (operator); see flow webhook deliveries",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ID"); err != nil {
						return err
					}
					res, err := c.admin.TestWebhook(ctx, &adminv1.TestWebhookRequest{Id: args[0]})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "test event queued: delivery %d\n", res.GetDeliveryId()) })
				}
			}},
		{name: "deliveries", args: "[ID]", summary: "deliveries, newest first: status (pending, delivered, dead), attempts and last error; of one subscription with ID",
			flags: func(fs *pflag.FlagSet) runFunc {
				status := fs.String("status", "", "only pending, delivered or dead ones")
				limit := fs.Int32("limit", 50, "at most this many (up to 1000)")
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) > 1 {
						return usageError{errors.New("want at most one argument: a webhook ID")}
					}
					req := &adminv1.ListWebhookDeliveriesRequest{Status: *status, Limit: *limit}
					if len(args) == 1 {
						req.WebhookId = args[0]
					}
					res, err := c.admin.ListWebhookDeliveries(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						if len(res.GetDeliveries()) == 0 {
							fmt.Fprintln(w, "no deliveries")
							return
						}
						printDeliveries(w, res.GetDeliveries())
					})
				}
			}},
		{name: "redrive", args: "(DELIVERY... | --webhook ID)", summary: "send dead-lettered deliveries again with fresh attempts: the ones named, or every dead one of a subscription (operator)",
			flags: func(fs *pflag.FlagSet) runFunc {
				webhook := fs.String("webhook", "", "redrive every dead delivery of this subscription")
				return func(ctx context.Context, c *env, args []string) error {
					req := &adminv1.RedriveWebhookDeliveriesRequest{WebhookId: *webhook}
					for _, a := range args {
						id, err := strconv.ParseInt(a, 10, 64)
						if err != nil {
							return usageError{fmt.Errorf("%q is not a delivery ID (a number, see flow webhook deliveries)", a)}
						}
						req.Ids = append(req.Ids, id)
					}
					if len(req.Ids) == 0 && req.WebhookId == "" {
						return usageError{errors.New("name delivery IDs, or --webhook ID for all its dead letters")}
					}
					res, err := c.admin.RedriveWebhookDeliveries(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "redriven: %d deliveries\n", len(res.GetIds())) })
				}
			}},
	},
}

func printWebhooks(w io.Writer, ws []*adminv1.Webhook) {
	rows := make([][]string, len(ws))
	for i, x := range ws {
		scope := "site"
		if len(x.GetRacks()) > 0 {
			scope = "rack=" + strings.Join(x.GetRacks(), ",")
		}
		delivery := "one event a request"
		if x.GetBatch() {
			delivery = fmt.Sprintf("batches of %d events, %d bytes", x.GetBatchMax(), x.GetBatchMaxBytes())
		}
		rows[i] = []string{x.GetId(), x.GetUrl(), strings.Join(x.GetEventTypes(), ","), scope, delivery, x.GetDescription()}
	}
	printTable(w, []string{"ID", "URL", "EVENTS", "SCOPE", "DELIVERY", "DESCRIPTION"}, rows)
}

func printDeliveries(w io.Writer, ds []*adminv1.WebhookDelivery) {
	rows := make([][]string, len(ds))
	for i, d := range ds {
		code, when := "-", d.GetCreatedAt().AsTime().Local().Format(time.RFC3339)
		if d.GetLastStatusCode() != 0 {
			code = strconv.Itoa(int(d.GetLastStatusCode()))
		}
		rows[i] = []string{strconv.FormatInt(d.GetId(), 10), d.GetEventType(), d.GetSubject(), d.GetStatus(), strconv.Itoa(int(d.GetAttempts())), code, when, d.GetLastError()}
	}
	printTable(w, []string{"ID", "EVENT", "SUBJECT", "STATUS", "ATTEMPTS", "HTTP", "CREATED", "LAST ERROR"}, rows)
}
