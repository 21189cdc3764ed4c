package app

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/nicoflow/flow/edge"
)

// certCommand is `flow cert dev DIR`.
func certCommand(stdout io.Writer) *cobra.Command {
	cert := &cobra.Command{Use: "cert", Short: "certificates: dev (a throwaway CA and certificates for trying mTLS)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var hosts []string
	dev := &cobra.Command{
		Use:   "dev DIR",
		Short: "write a throwaway CA, a server certificate and a client certificate per role (admin, operator, viewer) with a sample policy.yaml into DIR",
		Long: `Write a throwaway CA, a server certificate and a client certificate per role
(admin, operator, viewer) into DIR, with a sample policy.yaml, to try mutual
TLS and roles on one machine (docs/security.md). Not for production: the CA
key sits beside the certificates.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := edge.WriteDevCerts(args[0], hosts); err != nil {
				return err
			}
			abs, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			printDevCerts(stdout, abs)
			return nil
		},
	}
	dev.Flags().StringSliceVar(&hosts, "host", nil, "extra DNS name or IP for the server certificate (repeatable)")
	cert.AddCommand(dev)
	return cert
}

func printDevCerts(w io.Writer, dir string) {
	fmt.Fprintf(w, "wrote a throwaway CA, a server certificate and client certificates to %s (valid %d days; not for production)\n\n", dir, int(edge.DevCertValidity.Hours()/24))
	fmt.Fprintf(w, "  server   CERTDIR=%[1]s FLOW_AUTHZ_POLICY=%[1]s/policy.yaml flow serve\n", dir)
	for _, r := range edge.DevRoles {
		fmt.Fprintf(w, "  %-8s --ca %[2]s/ca.crt --cert %[2]s/%[1]s.crt --key %[2]s/%[1]s.key   (%[3]s)\n", r, dir, edge.DevSPIFFEID(r))
	}
	fmt.Fprintf(w, "\n  flow --ca %[1]s/ca.crt --cert %[1]s/operator.crt --key %[1]s/operator.key rack list --server localhost:50051\n", dir)
	fmt.Fprintf(w, "  curl --cacert %[1]s/ca.crt --cert %[1]s/viewer.crt --key %[1]s/viewer.key -H 'Content-Type: application/json' -d '{}' https://localhost:50051/v1.Flow/Version\n", dir)
}
