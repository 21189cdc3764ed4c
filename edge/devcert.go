package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// devTrustDomain is the SPIFFE trust domain of `flow cert dev`'s client
// certificates.
const devTrustDomain = "flow.dev"

// DevRoles are the client certificates WriteDevCerts writes (`flow cert
// dev`), one per role.
var DevRoles = []string{"admin", "operator", "viewer"}

// DevSPIFFEID is the SPIFFE ID of the dev client certificate for role.
func DevSPIFFEID(role string) string {
	return "spiffe://" + devTrustDomain + "/ns/flow/sa/" + role
}

// DevCertValidity is how long WriteDevCerts's certificates are valid.
const DevCertValidity = 90 * 24 * time.Hour

// WriteDevCerts writes a throwaway certificate set into dir for trying
// mutual TLS and roles on one machine: ca.crt and ca.key (a new CA),
// tls.crt and tls.key (the server, valid for localhost, 127.0.0.1, ::1 and
// hosts), so CERTDIR=dir serves with them, and for each role R R.crt and
// R.key (a client whose SPIFFE ID is spiffe://flow.dev/ns/flow/sa/R and CN
// R), plus policy.yaml granting each its role. Keys are written 0600. It
// refuses to overwrite an existing ca.crt.
func WriteDevCerts(dir string, hosts []string) error {
	if _, err := os.Stat(filepath.Join(dir, certDirCA)); err == nil {
		return fmt.Errorf("%s already holds a CA (%s): remove it or pick another folder", dir, certDirCA)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	now := time.Now().Add(-5 * time.Minute) // tolerate clock skew
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Flow dev CA (throwaway)", Organization: []string{"flow cert dev"}},
		NotBefore:             now,
		NotAfter:              now.Add(DevCertValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}

	server := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "flow-server"},
		NotBefore:    now,
		NotAfter:     now.Add(DevCertValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client auth too, as SPIFFE SVIDs: the server's certificate is also its
		// client certificate towards PostgreSQL (DB_CERT_PATH) and backends.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else if h != "" {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := issue(dir, "tls", server, ca, caKey); err != nil {
		return err
	}
	var policy strings.Builder
	policy.WriteString("# Flow authorization policy (FLOW_AUTHZ_POLICY): identity → role.\n" +
		"# Identities are SPIFFE IDs (URI SAN) or, without one, the subject CN;\n" +
		"# a pattern may end in /* (spiffe://domain/ns/*). Roles: viewer, operator, admin.\n" +
		"identities:\n")
	for _, role := range DevRoles {
		u, err := url.Parse(DevSPIFFEID(role))
		if err != nil {
			return err
		}
		client := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: role},
			NotBefore:    now,
			NotAfter:     now.Add(DevCertValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			URIs:         []*url.URL{u},
		}
		if err := issue(dir, role, client, ca, caKey); err != nil {
			return err
		}
		fmt.Fprintf(&policy, "  %s: %s\n", DevSPIFFEID(role), role)
	}
	return os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy.String()), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// issue signs tmpl with the CA and writes name.crt and name.key.
func issue(dir, name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(dir, name, der, key)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), crt, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}
