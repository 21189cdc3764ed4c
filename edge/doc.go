// Package edge is Flow's request edge: everything a call meets on the API
// port before a domain handler runs, and the operator endpoints of the
// admin listener. It owns
//
//   - the handler chain of the API port (NewHandler): gRPC, gRPC-Web and
//     Connect for v1.Flow and flow.admin.v1, the rpc log line, the audit
//     line (audit.go), authorization (authz.go: the method → role table and
//     the FLOW_AUTHZ_POLICY file), the internal-error guard and the panic
//     trap, gRPC health (health.go, healthconnect.go) and, in dev mode,
//     server reflection;
//   - the request limits (limits.go: body and decompressed size, strings,
//     lists, pages, concurrent listings, timeouts), the strict JSON codec
//     (strictjson.go) and the Flow-Ignored-Fields header naming the unknown
//     JSON fields it dropped (ignoredfields.go);
//   - the caller's identity (from the verified client certificate) and
//     request ID in each request's context (package caller);
//   - the API's TLS (tls.go: certificate sources, reloading on rotation,
//     SetupSecurity) and the throwaway certificates of `flow cert dev`
//     (devcert.go);
//   - the HTTP servers' shape (NewHTTPServer, NewAdminServer) and the admin
//     listener's mux (adminlistener.go: /metrics, /healthz, /readyz, River
//     UI, pprof).
//
// It gets plain values (Limits, SecurityConfig, Options, AdminOptions),
// never app's Config: app reads the settings, composes the v1.Flow service
// from the domains' handlers and hands it here. edge may import only
// caller and generated code (proto/gen); it knows no domain, and nothing
// but app imports it (app/imports_test.go).
package edge
