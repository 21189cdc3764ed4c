package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nicoflow/flow/edge"
)

// setupSecurity resolves the API port's certificates and policy from cfg
// (edge.SetupSecurity); cleartext is flow dev's. Some but not all FLOW_TLS_*
// files is a usage error.
func setupSecurity(ctx context.Context, cfg Config, logger *slog.Logger, cleartext bool) (edge.Security, error) {
	sec, err := edge.SetupSecurity(ctx, logger, edge.SecurityConfig{
		Files:         edge.CertFiles{CA: cfg.TLS.CA, Cert: cfg.TLS.Cert, Key: cfg.TLS.Key},
		CertDir:       cfg.CertDir,
		AllowInsecure: cfg.AllowInsecure,
		PolicyPath:    cfg.AuthzPolicy,
		ListenAddr:    cfg.ListenAddr,
		Cleartext:     cleartext,
	})
	if errors.Is(err, edge.ErrTLSFilesIncomplete) {
		return edge.Security{}, usageError(err)
	}
	return sec, err
}
