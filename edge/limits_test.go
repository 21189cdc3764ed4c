package edge

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONPathAt(t *testing.T) {
	t.Parallel()
	doc := `{"rack":{"info":{"name":"x"},"components":[{"position":{"slot_id":1}},{"position":{"slot_id":"bad"}}]},"n":[1,[2,3]]}`
	for _, tt := range []struct{ token, want string }{
		{`"rack"`, "rack"},
		{`"name"`, "rack.info.name"},
		{`"x"`, "rack.info.name"},
		{`"bad"`, "rack.components[1].position.slot_id"},
		{`3]`, "n[1][1]"},
	} {
		off := strings.Index(doc, tt.token)
		require.GreaterOrEqual(t, off, 0, tt.token)
		require.Equal(t, tt.want, jsonPathAt([]byte(doc), off), tt.token)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", Truncate("abc", 3))
	require.Equal(t, "ab…(4 bytes)", Truncate("abcd", 2))
	// Never cuts a rune in half.
	require.Equal(t, "a…(5 bytes)", Truncate("aéé", 2))
}
