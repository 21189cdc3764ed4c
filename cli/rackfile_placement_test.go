package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSplitPlacement: a rack file's power_feed and coolant_loop (at its
// top or in its "rack") are taken out for SetRackPlacement, the rest left
// for CreateExpectedRack; a bad name is refused before anything is sent.
func TestSplitPlacement(t *testing.T) {
	t.Parallel()
	rest, place, err := splitPlacement([]byte(`{"rack": {"info": {"name": "r1"}, "power_feed": "hall-0/bw-a", "coolant_loop": "cdu-1"}}`))
	require.NoError(t, err)
	require.Equal(t, "hall-0/bw-a", place.GetPowerFeed())
	require.Equal(t, "cdu-1", place.GetCoolantLoop())
	var m map[string]map[string]any
	require.NoError(t, json.Unmarshal(rest, &m))
	require.Equal(t, map[string]any{"info": map[string]any{"name": "r1"}}, m["rack"])

	rest, place, err = splitPlacement([]byte(`{"info": {"name": "r1"}, "coolant_loop": ""}`))
	require.NoError(t, err)
	require.Nil(t, place.PowerFeed)
	require.Equal(t, "", place.GetCoolantLoop())
	require.JSONEq(t, `{"info": {"name": "r1"}}`, string(rest))

	in := []byte(`{"info": {"name": "r1"}}`)
	rest, place, err = splitPlacement(in)
	require.NoError(t, err)
	require.Nil(t, place)
	require.Equal(t, in, rest)

	_, _, err = splitPlacement([]byte(`{"info": {}, "power_feed": "bw-a,bw-b"}`))
	require.ErrorContains(t, err, "power_feed")
	_, _, err = splitPlacement([]byte(`{"info": {}, "coolant_loop": 3}`))
	require.ErrorContains(t, err, "coolant_loop: want a string")
}
