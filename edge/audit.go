package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/caller"
)

// maxAuditValue bounds each value an audit line quotes (the request
// limits are checked after the audit line is written).
const maxAuditValue = 256

// maxAuditTargets bounds the targets one audit line lists.
const maxAuditTargets = 20

// newAuditInterceptor writes one "audit" log line for every call of a
// mutating procedure (one that needs operator or admin), allowed or not:
// who (identity, peer address), what (method, the request's targets and
// the IDs the answer created), the outcome (ok or the error code and
// message) and the request ID. Reads are not audited; the rpc line logs
// them.
func newAuditInterceptor(logger *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			procedure := req.Spec().Procedure
			if procedureRole(procedure) < roleOperator {
				return next(ctx, req)
			}
			res, err := next(ctx, req)
			var targets []string
			if m, ok := req.Any().(proto.Message); ok {
				targets = auditTargets(m.ProtoReflect(), false)
			}
			if err == nil && res != nil {
				if m, ok := res.Any().(proto.Message); ok {
					targets = append(targets, auditTargets(m.ProtoReflect(), true)...)
				}
			}
			a := Audit{Identity: caller.Identity(ctx), Method: procedure, Targets: targets, Outcome: "ok",
				RequestID: caller.RequestID(ctx), Peer: req.Peer().Addr}
			if err != nil {
				a.Outcome = connect.CodeOf(err).String()
				var ce *connect.Error
				if errors.As(err, &ce) {
					a.Error = ce.Message()
				}
			}
			a.Log(ctx, logger)
			return res, err
		}
	}
}

// Audit is one audit line: who (Identity, Peer), what (Method, Targets),
// the Outcome ("ok", or why not: the error code, an HTTP status) with the
// Error's message, and the RequestID. The API's interceptor writes one
// for every mutating call; River UI's wrapper in the console
// (console/jobs.go) writes one for every mutating River UI call, in the
// same shape.
type Audit struct {
	Identity, Method string
	Targets          []string
	Outcome, Error   string
	RequestID, Peer  string
}

// Log writes a as one INFO line "audit" on logger.
func (a Audit) Log(ctx context.Context, logger *slog.Logger) {
	targets := a.Targets
	if len(targets) > maxAuditTargets {
		targets = append(targets[:maxAuditTargets:maxAuditTargets], fmt.Sprintf("(+%d more)", len(targets)-maxAuditTargets))
	}
	attrs := []slog.Attr{
		slog.String("identity", a.Identity),
		slog.String("method", a.Method),
		slog.Any("targets", targets),
		slog.String("outcome", a.Outcome),
		slog.String("request_id", a.RequestID),
		slog.String("peer", a.Peer),
	}
	if a.Error != "" {
		attrs = append(attrs, slog.String("error", a.Error))
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
}

// auditTargets lists what a message names: every v1.UUID and every id,
// name, external_id or serial_number string, as "field.path=value", never
// descending into credentials. From a response (result) it takes only the
// top-level UUIDs (the IDs a call created, such as task_ids) as
// "result.field=value".
func auditTargets(m protoreflect.Message, result bool) []string {
	var out []string
	var walk func(m protoreflect.Message, path string, depth int)
	walk = func(m protoreflect.Message, path string, depth int) {
		if depth > 8 || len(out) > maxAuditTargets {
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			name := string(fd.Name())
			if secretField(name) || fd.IsMap() {
				return true
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			switch {
			case fd.Kind() == protoreflect.MessageKind && fd.IsList():
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					visit(l.Get(i).Message(), p, depth, result, &out, walk)
				}
			case fd.Kind() == protoreflect.MessageKind:
				visit(v.Message(), p, depth, result, &out, walk)
			case !result && fd.Kind() == protoreflect.StringKind && !fd.IsList() && targetField(name):
				out = append(out, p+"="+Truncate(v.String(), maxAuditValue))
			}
			return true
		})
	}
	prefix := ""
	if result {
		prefix = "result"
	}
	walk(m, prefix, 0)
	return out
}

func visit(m protoreflect.Message, path string, depth int, result bool, out *[]string, walk func(protoreflect.Message, string, int)) {
	if m.Descriptor().FullName() == "v1.UUID" {
		if id := m.Get(m.Descriptor().Fields().ByName("id")).String(); id != "" {
			*out = append(*out, path+"="+Truncate(id, maxAuditValue))
		}
		return
	}
	if !result {
		walk(m, path, depth+1)
	}
}

func targetField(name string) bool {
	switch name {
	case "id", "name", "external_id", "serial_number", "component_id", "reason":
		return true
	}
	return false
}

// secretField reports whether a field may hold credentials and so is never
// read for the audit line.
func secretField(name string) bool {
	for _, s := range []string{"auth", "credential", "password", "secret", "token"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
