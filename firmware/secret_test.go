package firmware

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func ptr(s string) *string { return &s }

func rawKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestMarshalMatchesWireMessage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		d    AuthData
		wire *flowv1.FirmwareAuthenticationData
	}{
		{"Shared", AuthData{Shared: ptr("tok")}, &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: "tok"}}},
		{"PerComponent", AuthData{Compute: ptr("c"), PowerShelf: ptr("")}, &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_PerComponent{PerComponent: &flowv1.PerComponentFirmwareAuthenticationData{Compute: ptr("c"), Powershelf: ptr("")}}}},
		{"AllThree", AuthData{Compute: ptr("c"), NVSwitch: ptr("n"), PowerShelf: ptr("p")}, &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_PerComponent{PerComponent: &flowv1.PerComponentFirmwareAuthenticationData{Compute: ptr("c"), Nvswitch: ptr("n"), Powershelf: ptr("p")}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(tt.wire)
			require.NoError(t, err)
			require.Equal(t, want, tt.d.marshal())
			back, err := unmarshalAuthData(want)
			require.NoError(t, err)
			require.Equal(t, tt.d, back)
		})
	}
}

// TestEnvelopeFollowsSpec opens an envelope with an independent reading of
// spec/execution.md §12: key ID, AAD and nonce layout.
func TestEnvelopeFollowsSpec(t *testing.T) {
	t.Parallel()
	raw := rawKey(7)
	kr, err := NewKeyring(raw)
	require.NoError(t, err)
	env, err := kr.Seal(AuthData{Shared: ptr("s3cret")})
	require.NoError(t, err)

	sum := sha256.Sum256(raw)
	require.Equal(t, fmt.Sprintf("%x", sum), env.KeyID)
	require.Len(t, env.KeyID, 64)
	require.Equal(t, 1, env.Version)

	h := sha256.New()
	h.Write([]byte("flow-encrypted-data-envelope"))
	h.Write([]byte{0, 0, 0, 1})
	h.Write([]byte(env.KeyID))
	h.Write([]byte("flow:firmware-authentication"))
	block, _ := aes.NewCipher(raw)
	gcm, _ := cipher.NewGCM(block)
	sealed, err := base64.StdEncoding.DecodeString(env.Ciphertext)
	require.NoError(t, err)
	plain, err := gcm.Open(nil, sealed[:12], sealed[12:], h.Sum(nil))
	require.NoError(t, err)
	var wire flowv1.FirmwareAuthenticationData
	require.NoError(t, proto.Unmarshal(plain, &wire))
	require.Equal(t, "s3cret", wire.GetShared())

	require.NotContains(t, env.Ciphertext, "s3cret")
	js, err := MarshalEnvelope(env)
	require.NoError(t, err)
	require.NotContains(t, string(js), "s3cret")
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	kr, err := NewKeyring(rawKey(1))
	require.NoError(t, err)

	env, err := kr.Seal(AuthData{})
	require.NoError(t, err)
	require.Nil(t, env, "empty data is not sealed")
	env, err = kr.Seal(AuthData{Shared: ptr("")})
	require.NoError(t, err)
	require.Nil(t, env, "a shared empty string counts as absent")
	env, err = kr.Seal(AuthData{Compute: ptr(""), NVSwitch: ptr("")})
	require.NoError(t, err)
	require.Nil(t, env, "all-empty per-component values count as absent")

	env, err = kr.Seal(AuthData{NVSwitch: ptr("n-token")})
	require.NoError(t, err)
	d, err := kr.Open(env)
	require.NoError(t, err)
	tok, err := d.For("NVSwitch")
	require.NoError(t, err)
	require.Equal(t, "n-token", tok)
	tok, err = d.For("Compute")
	require.NoError(t, err)
	require.Empty(t, tok)
	_, err = d.For("CDU")
	require.Error(t, err)

	d, err = kr.Open(nil)
	require.NoError(t, err)
	require.True(t, d.Empty())
}

func TestOpenFailures(t *testing.T) {
	t.Parallel()
	a, err := NewKeyring(rawKey(1))
	require.NoError(t, err)
	b, err := NewKeyring(rawKey(2))
	require.NoError(t, err)
	both, err := NewKeyring(rawKey(2), rawKey(1))
	require.NoError(t, err)
	env, err := a.Seal(AuthData{Shared: ptr("x")})
	require.NoError(t, err)

	_, err = (*Keyring)(nil).Open(env)
	require.ErrorIs(t, err, ErrNoKey)
	_, err = (*Keyring)(nil).Seal(AuthData{Shared: ptr("x")})
	require.ErrorIs(t, err, ErrNoKey)

	_, err = b.Open(env)
	require.ErrorIs(t, err, ErrKeyMismatch)
	require.Contains(t, err.Error(), env.KeyID)
	require.Contains(t, err.Error(), b.CurrentKeyID())

	v2 := *env
	v2.Version = 2
	_, err = a.Open(&v2)
	require.ErrorIs(t, err, ErrBadEnvelope)
	require.Contains(t, err.Error(), "unsupported encrypted data version 2")

	// The key ID is authenticated: relabelling the envelope fails even when
	// the server holds the other key.
	relabelled := *env
	relabelled.KeyID = b.CurrentKeyID()
	_, err = both.Open(&relabelled)
	require.ErrorIs(t, err, ErrBadEnvelope)

	tampered := *env
	ct, _ := base64.StdEncoding.DecodeString(env.Ciphertext)
	ct[len(ct)-1] ^= 1
	tampered.Ciphertext = base64.StdEncoding.EncodeToString(ct)
	_, err = a.Open(&tampered)
	require.ErrorIs(t, err, ErrBadEnvelope)

	empty := *env
	empty.KeyID = ""
	_, err = a.Open(&empty)
	require.ErrorIs(t, err, ErrBadEnvelope)
}

func TestRotation(t *testing.T) {
	t.Parallel()
	old, err := NewKeyring(rawKey(1))
	require.NoError(t, err)
	inFlight, err := old.Seal(AuthData{Shared: ptr("before-rotation")})
	require.NoError(t, err)

	rotated, err := NewKeyring(rawKey(2), rawKey(1))
	require.NoError(t, err)
	require.Equal(t, KeyID(rawKey(2)), rotated.CurrentKeyID())
	require.ElementsMatch(t, []string{KeyID(rawKey(1)), KeyID(rawKey(2))}, rotated.KeyIDs())

	d, err := rotated.Open(inFlight)
	require.NoError(t, err, "tasks sealed before the rotation still open")
	require.Equal(t, "before-rotation", *d.Shared)

	fresh, err := rotated.Seal(AuthData{Shared: ptr("after")})
	require.NoError(t, err)
	require.Equal(t, rotated.CurrentKeyID(), fresh.KeyID, "new data is sealed with the current key")
	_, err = old.Open(fresh)
	require.ErrorIs(t, err, ErrKeyMismatch)
}

func TestLoadKeyring(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	good := write("good", base64.StdEncoding.EncodeToString(rawKey(3))+"\n")
	retired := write("retired", base64.StdEncoding.EncodeToString(rawKey(4)))

	kr, err := LoadKeyring("", nil)
	require.NoError(t, err)
	require.Nil(t, kr, "unset: no keyring, Flow starts with a warning")

	// A key file its group or others can read is refused, current or
	// retired, naming the file and its mode.
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		open := write("open", base64.StdEncoding.EncodeToString(rawKey(5)))
		require.NoError(t, os.Chmod(open, mode))
		_, err = LoadKeyring(open, nil)
		require.ErrorIs(t, err, ErrKeyFileMode)
		require.ErrorContains(t, err, fmt.Sprintf("%s has mode %04o", open, mode))
		_, err = LoadKeyring(good, []string{open})
		require.ErrorIs(t, err, ErrKeyFileMode)
	}
	ro := write("ro", base64.StdEncoding.EncodeToString(rawKey(6)))
	require.NoError(t, os.Chmod(ro, 0o400))
	_, err = LoadKeyring(ro, nil)
	require.NoError(t, err, "owner-only read is fine")

	kr, err = LoadKeyring(good, []string{retired})
	require.NoError(t, err)
	require.Equal(t, KeyID(rawKey(3)), kr.CurrentKeyID())
	require.Len(t, kr.KeyIDs(), 2)

	for _, tt := range []struct {
		name, path, want string
	}{
		{"Unreadable", filepath.Join(dir, "missing"), "read data encryption key"},
		{"Empty", write("empty", "  \n"), "data encryption key is empty"},
		{"NotBase64", write("nb64", "not base64!"), "must be base64 encoded"},
		{"WrongLength", write("short", base64.StdEncoding.EncodeToString([]byte("short"))), "must decode to exactly 32 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadKeyring(tt.path, nil)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, tt.path, "the message names the file")
		})
	}
	_, err = LoadKeyring("", []string{retired})
	require.ErrorContains(t, err, "retired keys need a current key")
}

func TestAuthDataNeverPrints(t *testing.T) {
	t.Parallel()
	d := AuthData{Shared: ptr("hunter2")}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "auth", d)
	require.NotContains(t, buf.String(), "hunter2")
	require.NotContains(t, fmt.Sprintf("%v %+v %#v %s", d, d, d, d), "hunter2")
}

// TestGroupReadOK: a key file its group may read is accepted only in the
// shape Kubernetes gives a non-root pod's Secret (root-owned, g+r only,
// the group one of the process's), so that a pod with an fsGroup can run.
func TestGroupReadOK(t *testing.T) {
	t.Parallel()
	mine := []int{0, 65532}
	for _, tc := range []struct {
		name     string
		perm     os.FileMode
		uid, gid uint32
		want     bool
	}{
		{"KubernetesSecretWithFSGroup", 0o440, 0, 65532, true},
		{"OwnerReadWriteGroupRead", 0o640, 0, 65532, true},
		{"GroupNotMine", 0o440, 0, 1000, false},
		{"NotRootOwned", 0o440, 1000, 65532, false},
		{"GroupWritable", 0o460, 0, 65532, false},
		{"OthersRead", 0o444, 0, 65532, false},
		{"GroupExecutable", 0o450, 0, 65532, false},
		{"RootGroup", 0o440, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, groupReadOK(tc.perm, tc.uid, tc.gid, mine))
		})
	}
}
