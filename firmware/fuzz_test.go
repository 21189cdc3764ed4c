package firmware

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzEnvelope feeds the envelope decoder arbitrary bytes three ways: as a
// stored envelope's JSON (Open must refuse it with ErrBadEnvelope or
// ErrKeyMismatch, never panic), as the plaintext of an authentic envelope
// (sealed with the server's key, so Open reaches the credential decoder:
// it returns what unmarshalAuthData returns, or ErrBadEnvelope), and as a
// credential encoding (what decodes re-encodes and seals to the same
// credentials).
func FuzzEnvelope(f *testing.F) {
	kr, err := NewKeyring(rawKey(7), rawKey(9))
	require.NoError(f, err)
	sealed, err := kr.Seal(AuthData{Shared: ptr("token")})
	require.NoError(f, err)
	good, err := MarshalEnvelope(sealed)
	require.NoError(f, err)
	f.Add([]byte(good))
	f.Add([]byte(`{"version":1,"key_id":"` + sealed.KeyID + `","ciphertext":"AAAA"}`))
	f.Add([]byte(`{"version":2,"key_id":"x","ciphertext":""}`))
	f.Add([]byte(`{"version":1,"key_id":"","ciphertext":"` + sealed.Ciphertext + `"}`))
	f.Add([]byte(`{"version":1,"key_id":"` + sealed.KeyID + `","ciphertext":"not base64!"}`))
	f.Add([]byte(`{"version":1,"key_id":"0000000000000000","ciphertext":"` + sealed.Ciphertext + `"}`))
	f.Add(AuthData{Shared: ptr("s")}.marshal())
	f.Add(AuthData{Compute: ptr("c"), PowerShelf: ptr("")}.marshal())
	f.Add([]byte{0x12, 0x02, 0x0a, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		// 1. As envelope JSON.
		var e Envelope
		if json.Unmarshal(raw, &e) == nil {
			d, err := kr.Open(&e)
			if err != nil {
				require.True(t, errors.Is(err, ErrBadEnvelope) || errors.Is(err, ErrKeyMismatch), "%v", err)
			} else {
				again, err := kr.Seal(d)
				require.NoError(t, err)
				back, err := kr.Open(again)
				require.NoError(t, err)
				requireSame(t, d, back)
			}
		}

		// 2. As the plaintext of an authentic envelope.
		k := kr.current
		nonce := make([]byte, k.aead.NonceSize())
		_, err := rand.Read(nonce)
		require.NoError(t, err)
		env := &Envelope{Version: EnvelopeVersion, KeyID: k.id,
			Ciphertext: base64.StdEncoding.EncodeToString(k.aead.Seal(nonce, nonce, raw, aad(EnvelopeVersion, k.id)))}
		opened, openErr := kr.Open(env)
		direct, directErr := unmarshalAuthData(raw)
		if directErr != nil {
			require.ErrorIs(t, openErr, ErrBadEnvelope)
			return
		}
		require.NoError(t, openErr)
		require.Equal(t, direct.marshal(), opened.marshal())

		// 3. As a credential encoding: decode, encode, decode is stable,
		// and sealing round-trips.
		again, err := unmarshalAuthData(direct.marshal())
		require.NoError(t, err)
		require.Equal(t, direct.marshal(), again.marshal())
		s, err := kr.Seal(direct)
		require.NoError(t, err)
		back, err := kr.Open(s)
		require.NoError(t, err)
		requireSame(t, direct, back)
	})
}

// requireSame: b carries the credentials of a. Empty data (no value, or
// only empty ones) seals to no envelope and opens as none.
func requireSame(t *testing.T, a, b AuthData) {
	t.Helper()
	if a.Empty() {
		require.True(t, b.Empty())
		return
	}
	require.Equal(t, a.marshal(), b.marshal())
}
