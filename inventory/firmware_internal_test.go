package inventory

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSubVersions(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{}`,
		`{"bmc": ["2.0"]}`,
		`{"bmc": ["2.0"], "nic": ["28.39.1002", "28.39.1002"]}`,
		`{"bmc":[],"x":["a b","c/d"]}`,
		` { "bmc" : [ "1" ] } `,
		`{"bmc": ["quote \" inside"]}`, // escapes: encoding/json
		`{"bmc": ["\u00e9"]}`,
	} {
		var want SubVersions
		require.NoError(t, json.Unmarshal([]byte(in), &want), in)
		got, err := parseSubVersions([]byte(in))
		require.NoError(t, err, in)
		require.True(t, got.Equal(want), "%s: %v != %v", in, got, want)
	}
	for _, bad := range []string{``, `{`, `{"bmc": "2.0"}`, `{"bmc": ["2.0"]} x`, `[]`} {
		_, err := parseSubVersions([]byte(bad))
		require.Error(t, err, bad)
	}
}
