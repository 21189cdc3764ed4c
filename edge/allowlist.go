package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Upstream Flow's authorization modes (FLOW_AUTHORIZATION_MODE). In audit
// mode (the default) a caller missing from the allowlist is logged and let
// through; in enforce mode it is refused.
const (
	AuthzModeAudit   = "audit"
	AuthzModeEnforce = "enforce"
)

// ParseAuthzMode returns the mode FLOW_AUTHORIZATION_MODE names: "" and
// "audit" are audit, "enforce" (also "enforcing", "enforced", any case) is
// enforce. Anything else is an error naming the accepted values.
func ParseAuthzMode(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", AuthzModeAudit:
		return AuthzModeAudit, nil
	case AuthzModeEnforce, "enforcing", "enforced":
		return AuthzModeEnforce, nil
	}
	return "", fmt.Errorf("FLOW_AUTHORIZATION_MODE: %q is not a mode (want audit or enforce)", s)
}

// LoadAllowedIdentities reads upstream's allowlist file
// (FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE): one SPIFFE ID per
// line, lines trimmed, blank lines skipped, no comment syntax. An
// unreadable file is an error naming it; a line that is not a SPIFFE ID is
// an error naming the file and the line number.
func LoadAllowedIdentities(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE: %w", err)
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if err := CheckSPIFFEID(line); err != nil {
			return nil, fmt.Errorf("FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE %s line %d: %w", path, n, err)
		}
		ids = append(ids, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE %s: %w", path, err)
	}
	return ids, nil
}

// CheckSPIFFEID returns an error unless id is a SPIFFE ID as upstream
// parses one (go-spiffe's spiffeid.FromString): spiffe://, a trust domain
// of lowercase letters, digits, dots, dashes and underscores, then an
// optional path of non-empty segments of letters, digits, dots, dashes and
// underscores, none of them "." or "..", without a trailing slash.
func CheckSPIFFEID(id string) error {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	if !ok {
		return fmt.Errorf("%q is not a SPIFFE ID (want spiffe://trust-domain/path)", id)
	}
	td, path, _ := strings.Cut(rest, "/")
	if td == "" {
		return fmt.Errorf("%q: the trust domain is empty", id)
	}
	for _, c := range td {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%q: the trust domain may hold only lowercase letters, digits, dots, dashes and underscores", id)
		}
	}
	if !strings.Contains(rest, "/") {
		return nil
	}
	for _, seg := range strings.Split(path, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%q: the path has an empty segment (or a trailing slash)", id)
		case ".", "..":
			return fmt.Errorf("%q: the path may not hold %q", id, seg)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return fmt.Errorf("%q: a path segment may hold only letters, digits, dots, dashes and underscores", id)
			}
		}
	}
	return nil
}

// AllowlistPolicy is upstream's authorization on Flow's roles: a listed
// identity may call every method (upstream lets it in everywhere, so it is
// admin); an identity not listed has no role in enforce mode (it may call
// only health), and in audit mode is let through as admin with a warning
// logged per call that enforce mode would refuse.
func AllowlistPolicy(ids []string, mode string) *Policy {
	p := &Policy{exact: map[string]Role{}, audit: mode != AuthzModeEnforce}
	for _, id := range ids {
		p.exact[id] = roleAdmin
	}
	return p
}
