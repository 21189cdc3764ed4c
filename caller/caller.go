// Package caller carries who is calling, and which request this is, through
// a call's context: the server's middleware sets them once per HTTP request
// (from the client certificate, or the insecure mode), and anything that
// records who did what (the audit log, a task's submitter) reads them.
package caller

import "context"

// Insecure is the identity of every caller of a server running cleartext
// (ALLOW_INSECURE_GRPC=true or flow dev): nobody is authenticated.
const Insecure = "insecure"

// System is the identity Identity returns for work no caller started
// (background jobs, tests calling services directly).
const System = "system"

type identityKey struct{}

type requestIDKey struct{}

// WithIdentity returns ctx carrying identity: a client certificate's SPIFFE
// ID or subject CN, or Insecure.
func WithIdentity(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, identityKey{}, identity)
}

// Identity returns the identity in ctx, or System when none was set. It is
// "" for a client certificate that names nobody (no SPIFFE ID, no CN),
// which the server refuses.
func Identity(ctx context.Context) string {
	if id, ok := ctx.Value(identityKey{}).(string); ok {
		return id
	}
	return System
}

// WithRequestID returns ctx carrying the request's ID (logged with every
// line about the request and echoed in the X-Request-Id response header).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request ID in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

type roleKey struct{}

// WithRole returns ctx carrying the role the authorization policy gave the
// caller ("viewer", "operator", "admin", "bms").
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// Role returns the caller's role in ctx, or "" when no policy decided one
// (no policy: every caller is admin).
func Role(ctx context.Context) string {
	r, _ := ctx.Value(roleKey{}).(string)
	return r
}
