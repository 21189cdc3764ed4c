package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nicoflow/flow/edge"
)

// spiffeDir is where the server looks for the SPIFFE mount
// (edge.SPIFFECertDir); tests that run flow serve as upstream's chart
// deploys it point it at their certificates.
var spiffeDir = edge.SPIFFECertDir

// setupSecurity resolves the API port's certificates and policy from cfg
// (edge.SetupSecurity); cleartext is flow dev's. Some but not all FLOW_TLS_*
// files is a usage error.
func setupSecurity(ctx context.Context, cfg Config, logger *slog.Logger, cleartext bool) (edge.Security, error) {
	sec, err := edge.SetupSecurity(ctx, logger, edge.SecurityConfig{
		Files:             edge.CertFiles{CA: cfg.TLS.CA, Cert: cfg.TLS.Cert, Key: cfg.TLS.Key},
		CertDir:           cfg.CertDir,
		AllowInsecure:     cfg.AllowInsecure,
		PolicyPath:        cfg.AuthzPolicy,
		SPIFFEDir:         spiffeDir,
		AuthzMode:         cfg.AuthzMode,
		AllowedIdentities: cfg.AllowedIdentities,
		AllowlistSource:   cfg.allowlistSource,
		RequireTLS:        cfg.requireTLS(),
		ListenAddr:        cfg.ListenAddr,
		Cleartext:         cleartext,
	})
	if errors.Is(err, edge.ErrTLSFilesIncomplete) {
		return edge.Security{}, usageError(err)
	}
	return sec, err
}
