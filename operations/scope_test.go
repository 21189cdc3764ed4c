package operations

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestTaskScopeBatch(t *testing.T) {
	t.Parallel()
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	sc, err := decodeScope(uuid.New(),
		[]byte(`{"Compute": ["`+a.String()+`", "`+b.String()+`"], "PowerShelf": ["`+c.String()+`"]}`),
		[]byte(`{"Compute": {"ids": ["m-a", "m-b"]}, "PowerShelf": {"by_mac": true, "ids": ["02:00:00:00:00:01"]}}`))
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b, a}, sc.batch(ComponentTypeCompute, []string{"m-b", "m-a"}), "in the call's order")
	require.Equal(t, []uuid.UUID{b}, sc.batch(ComponentTypeCompute, []string{"m-b", "not-in-scope"}))
	require.Equal(t, []uuid.UUID{c}, sc.batch(ComponentTypePowerShelf, []string{"02:00:00:00:00:01"}))
	require.Empty(t, sc.batch(ComponentTypeNVSwitch, []string{"m-a"}))

	_, err = decodeScope(uuid.New(), []byte(`{"Compute": 1}`), []byte(`{}`))
	require.ErrorContains(t, err, "decode task")
}

func TestScopeCacheForgetsOldestFirst(t *testing.T) {
	t.Parallel()
	var c scopeCache
	ids := make([]uuid.UUID, scopeCacheSize+2)
	for i := range ids {
		ids[i] = uuid.New()
		c.put(ids[i], &taskScope{})
	}
	require.Len(t, c.m, scopeCacheSize)
	for i, id := range ids {
		_, ok := c.get(id)
		require.Equal(t, i >= 2, ok, "entry %d", i)
	}
	kept, _ := c.get(ids[2])
	c.put(ids[2], &taskScope{})
	again, _ := c.get(ids[2])
	require.Same(t, kept, again, "a scope is never replaced")
}
