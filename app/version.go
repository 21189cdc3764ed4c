package app

import (
	"context"
	"runtime"
	"runtime/debug"

	"connectrpc.com/connect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Build is this binary's build information, read from debug.ReadBuildInfo.
type Build struct {
	Version   string // module version, e.g. v1.2.3 or a pseudo-version; "devel" for a plain checkout build
	Revision  string // VCS revision (commit hash), "+dirty" when built from a modified tree
	Time      string // VCS commit time, RFC 3339
	GoVersion string // Go toolchain that built the binary
}

// Build information set at link time (-X) by `make image`, for builds
// that Go cannot stamp from the VCS itself (a git worktree, whose .git is a
// file; a source tarball). Used only where debug.ReadBuildInfo has none.
var (
	linkVersion  string // the image's version label (git describe)
	linkRevision string // the commit
	linkTime     string // the commit time, RFC 3339
)

// ReadBuild returns the binary's build information.
func ReadBuild() Build {
	b := readBuildInfo()
	if b.Version == "devel" && linkVersion != "" {
		b.Version = linkVersion
	}
	if b.Revision == "" {
		b.Revision = linkRevision
	}
	if b.Time == "" {
		b.Time = linkTime
	}
	return b
}

// readBuildInfo returns what debug.ReadBuildInfo knows of the build.
func readBuildInfo() Build {
	b := Build{Version: "devel", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && b.Revision != "" {
		b.Revision += "+dirty"
	}
	return b
}

// versionHandler serves the Version RPC.
type versionHandler struct{ build Build }

// Version answers with the build information. BuildInfo has no field for the
// Go version, so it travels in the Flow-Go-Version response header.
func (h *versionHandler) Version(ctx context.Context, _ *flowv1.VersionRequest) (*flowv1.BuildInfo, error) {
	if call, ok := connect.CallInfoForHandlerContext(ctx); ok {
		call.ResponseHeader().Set("Flow-Go-Version", h.build.GoVersion)
	}
	return &flowv1.BuildInfo{
		Version:   h.build.Version,
		BuildTime: h.build.Time,
		GitCommit: h.build.Revision,
	}, nil
}
