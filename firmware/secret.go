// Package firmware runs firmware upgrades and guards their download
// credentials: authentication data is sealed in an AES-256-GCM envelope
// (spec/execution.md §12) before it reaches any table, job argument or log,
// and opened only for the call that starts an upgrade.
package firmware

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"syscall"

	"google.golang.org/protobuf/encoding/protowire"
)

// Errors of sealing and opening authentication data.
var (
	// ErrNoKey means no data-encryption key is configured, so authentication
	// data can be neither sealed nor opened.
	ErrNoKey = errors.New("data encryption cipher is not configured (set FLOW_DATA_ENCRYPTION_KEY_PATH)")
	// ErrKeyMismatch means the envelope was sealed with a key this server
	// does not hold.
	ErrKeyMismatch = errors.New("authentication data was encrypted with a key this server does not have")
	// ErrBadEnvelope means the envelope is malformed, of an unknown version,
	// or fails authentication (tampered, or the wrong key under a right ID).
	ErrBadEnvelope = errors.New("invalid encrypted authentication data")
	// ErrKeyFileMode means a key file is readable or writable by its group
	// or others; LoadKeyring refuses it, naming the file and its mode.
	ErrKeyFileMode = errors.New("data encryption key file is accessible to group or others")
)

// EnvelopeVersion is the only envelope format Flow writes and reads.
const EnvelopeVersion = 1

const (
	aadDomain = "flow-encrypted-data-envelope"
	purpose   = "flow:firmware-authentication"
)

// Envelope is sealed authentication data as stored in a task's payload.
type Envelope struct {
	Version    int    `json:"version"`
	KeyID      string `json:"key_id"`
	Ciphertext string `json:"ciphertext"` // standard base64 of nonce ‖ GCM output
}

// AuthData is firmware download credentials: one value shared by every
// component type, or a value per type (nil means none for that type).
type AuthData struct {
	Shared     *string
	Compute    *string
	NVSwitch   *string
	PowerShelf *string
}

// Empty reports whether d carries no credential at all: no value, a shared
// empty string, or per-type values that are all empty. Empty data is not
// sealed; the payload simply has none.
func (d AuthData) Empty() bool {
	for _, v := range []*string{d.Shared, d.Compute, d.NVSwitch, d.PowerShelf} {
		if v != nil && *v != "" {
			return false
		}
	}
	return true
}

// For returns the credential for a component type ("Compute", "NVSwitch",
// "PowerShelf"): the shared value, else the type's own, else "" (none).
func (d AuthData) For(componentType string) (string, error) {
	if d.Shared != nil {
		return *d.Shared, nil
	}
	var v *string
	switch componentType {
	case "Compute":
		v = d.Compute
	case "NVSwitch":
		v = d.NVSwitch
	case "PowerShelf":
		v = d.PowerShelf
	default:
		return "", fmt.Errorf("no authentication data for component type %s", componentType)
	}
	if v == nil {
		return "", nil
	}
	return *v, nil
}

// LogValue keeps credentials out of logs.
func (d AuthData) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// String keeps credentials out of fmt output.
func (d AuthData) String() string { return "[redacted]" }

// GoString keeps credentials out of %#v output.
func (d AuthData) GoString() string { return "firmware.AuthData{[redacted]}" }

// marshal returns the deterministic protobuf encoding of d as the wire
// message v1.FirmwareAuthenticationData (oneof value { string shared = 1;
// PerComponentFirmwareAuthenticationData per_component = 2 }, per-component
// optional strings compute = 1, nvswitch = 2, powershelf = 3).
func (d AuthData) marshal() []byte {
	if d.Shared != nil {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendString(b, *d.Shared)
	}
	var inner []byte
	for i, v := range []*string{d.Compute, d.NVSwitch, d.PowerShelf} {
		if v != nil {
			inner = protowire.AppendTag(inner, protowire.Number(i+1), protowire.BytesType)
			inner = protowire.AppendString(inner, *v)
		}
	}
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	return protowire.AppendBytes(b, inner)
}

// unmarshalAuthData parses the encoding written by marshal.
func unmarshalAuthData(b []byte) (AuthData, error) {
	var d AuthData
	perComponent := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return d, ErrBadEnvelope
		}
		b = b[n:]
		val, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return d, ErrBadEnvelope
		}
		b = b[n:]
		switch num {
		case 1:
			s := string(val)
			d.Shared = &s
		case 2:
			perComponent = true
			for len(val) > 0 {
				fnum, ftyp, m := protowire.ConsumeTag(val)
				if m < 0 || ftyp != protowire.BytesType {
					return d, ErrBadEnvelope
				}
				val = val[m:]
				s, m := protowire.ConsumeString(val)
				if m < 0 {
					return d, ErrBadEnvelope
				}
				val = val[m:]
				switch fnum {
				case 1:
					d.Compute = &s
				case 2:
					d.NVSwitch = &s
				case 3:
					d.PowerShelf = &s
				}
			}
		}
	}
	if d.Shared == nil && !perComponent {
		return d, fmt.Errorf("%w: authentication data value is required", ErrBadEnvelope)
	}
	return d, nil
}

// key is one AES-256 key and its ID.
type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring holds the data-encryption keys: the current key seals, and every
// key (current and retired) opens envelopes naming its ID. A nil *Keyring is
// valid and holds no key: Seal and Open then fail with ErrNoKey.
type Keyring struct {
	current *key
	byID    map[string]*key
}

// KeyID returns the ID of a raw 32-byte key: lowercase hex SHA-256.
func KeyID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// ParseKey decodes a key file's content: standard (padded) base64 of exactly
// 32 bytes, surrounding whitespace ignored.
func ParseKey(content []byte) ([]byte, error) {
	s := strings.TrimSpace(string(content))
	if s == "" {
		return nil, errors.New("data encryption key is empty")
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("data encryption key must be base64 encoded")
	}
	if len(raw) != 32 {
		return nil, fmt.Errorf("data encryption key must decode to exactly 32 bytes (got %d)", len(raw))
	}
	return raw, nil
}

// NewKeyring builds a keyring from raw 32-byte keys: current seals, retired
// only open. Duplicate keys are ignored.
func NewKeyring(current []byte, retired ...[]byte) (*Keyring, error) {
	kr := &Keyring{byID: map[string]*key{}}
	for i, raw := range append([][]byte{current}, retired...) {
		if len(raw) != 32 {
			return nil, fmt.Errorf("key %d: must be 32 bytes", i)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		k := &key{id: KeyID(raw), aead: aead}
		if i == 0 {
			kr.current = k
		}
		if _, dup := kr.byID[k.id]; !dup {
			kr.byID[k.id] = k
		}
	}
	return kr, nil
}

// LoadKeyring reads the current key from currentPath and retired keys from
// retiredPaths. An empty currentPath with no retired paths returns a nil
// keyring (no encryption configured). Every failure says which file and
// why: unreadable, empty, not base64, or not 32 bytes.
func LoadKeyring(currentPath string, retiredPaths []string) (*Keyring, error) {
	if strings.TrimSpace(currentPath) == "" {
		if len(retiredPaths) > 0 {
			return nil, errors.New("FLOW_DATA_DECRYPTION_KEY_PATHS is set but FLOW_DATA_ENCRYPTION_KEY_PATH is not: retired keys need a current key")
		}
		return nil, nil
	}
	read := func(path string) ([]byte, error) {
		fi, err := os.Stat(path) // the file, through Kubernetes' symlinks
		if err != nil {
			return nil, fmt.Errorf("read data encryption key %s: %w", path, err)
		}
		if perm := fi.Mode().Perm(); !keyFileModeOK(fi) {
			// As ssh refuses a private key others can read: whoever reads
			// it can open every stored firmware credential.
			return nil, fmt.Errorf("%w: %s has mode %04o; chmod 600 it (Kubernetes: defaultMode: 0400 on the secret volume, with the pod's fsGroup)", ErrKeyFileMode, path, perm)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read data encryption key %s: %w", path, err)
		}
		raw, err := ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return raw, nil
	}
	current, err := read(currentPath)
	if err != nil {
		return nil, err
	}
	var retired [][]byte
	for _, p := range retiredPaths {
		raw, err := read(p)
		if err != nil {
			return nil, err
		}
		retired = append(retired, raw)
	}
	return NewKeyring(current, retired...)
}

// CurrentKeyID returns the ID of the sealing key, or "" for a nil keyring.
func (kr *Keyring) CurrentKeyID() string {
	if kr == nil {
		return ""
	}
	return kr.current.id
}

// KeyIDs returns the IDs of every key, sorted.
func (kr *Keyring) KeyIDs() []string {
	if kr == nil {
		return nil
	}
	ids := make([]string, 0, len(kr.byID))
	for id := range kr.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func aad(version int, keyID string) []byte {
	h := sha256.New()
	h.Write([]byte(aadDomain))
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], uint32(version))
	h.Write(v[:])
	h.Write([]byte(keyID))
	h.Write([]byte(purpose))
	return h.Sum(nil)
}

// Seal encrypts d under the current key. Empty data seals to nil (store
// nothing). It fails with ErrNoKey when no key is configured.
func (kr *Keyring) Seal(d AuthData) (*Envelope, error) {
	if d.Empty() {
		return nil, nil
	}
	if kr == nil {
		return nil, ErrNoKey
	}
	k := kr.current
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	sealed := k.aead.Seal(nonce, nonce, d.marshal(), aad(EnvelopeVersion, k.id))
	return &Envelope{Version: EnvelopeVersion, KeyID: k.id, Ciphertext: base64.StdEncoding.EncodeToString(sealed)}, nil
}

// Open decrypts an envelope with the key it names. A nil envelope opens to
// empty data. Errors: ErrNoKey, ErrKeyMismatch (naming the envelope's key ID
// and the IDs this server holds), ErrBadEnvelope.
func (kr *Keyring) Open(e *Envelope) (AuthData, error) {
	if e == nil {
		return AuthData{}, nil
	}
	if kr == nil {
		return AuthData{}, ErrNoKey
	}
	if e.Version != EnvelopeVersion {
		return AuthData{}, fmt.Errorf("%w: unsupported encrypted data version %d", ErrBadEnvelope, e.Version)
	}
	if e.KeyID == "" {
		return AuthData{}, fmt.Errorf("%w: empty key_id", ErrBadEnvelope)
	}
	k, ok := kr.byID[e.KeyID]
	if !ok {
		return AuthData{}, fmt.Errorf("%w: envelope key %s, server keys [%s]", ErrKeyMismatch, e.KeyID, strings.Join(kr.KeyIDs(), ", "))
	}
	sealed, err := base64.StdEncoding.DecodeString(e.Ciphertext)
	if err != nil || len(sealed) < k.aead.NonceSize()+k.aead.Overhead() {
		return AuthData{}, fmt.Errorf("%w: malformed ciphertext", ErrBadEnvelope)
	}
	ns := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, sealed[:ns], sealed[ns:], aad(e.Version, e.KeyID))
	if err != nil {
		return AuthData{}, fmt.Errorf("%w: authentication failed", ErrBadEnvelope)
	}
	return unmarshalAuthData(plain)
}

// MarshalEnvelope returns the envelope's JSON form, as stored.
func MarshalEnvelope(e *Envelope) (json.RawMessage, error) { return json.Marshal(e) }

// keyFileModeOK reports whether a key file's mode keeps it to this process:
// no access for others, and none for the group, but for one shape, the one
// Kubernetes gives a Secret a non-root pod reads: owned by root, read-only
// for a group other than root's that this process is in (the pod's
// fsGroup, which the kubelet adds as g+r), mode 0440 or 0640.
func keyFileModeOK(fi os.FileInfo) bool {
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	return groupReadOK(perm, st.Uid, st.Gid, append(groups, os.Getegid()))
}

// groupReadOK is keyFileModeOK's rule for a file of mode perm owned by
// uid:gid, for a process in groups.
func groupReadOK(perm os.FileMode, uid, gid uint32, groups []int) bool {
	if perm&0o037 != 0 || perm&0o040 == 0 || uid != 0 || gid == 0 {
		return false
	}
	for _, g := range groups {
		if g >= 0 && uint32(g) == gid {
			return true
		}
	}
	return false
}
