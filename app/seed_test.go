package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
)

func TestSeedDemoRacks(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	added, err := seedDemoRacks(ctx, pool, 3)
	require.NoError(t, err)
	require.Equal(t, 3, added)
	added, err = seedDemoRacks(ctx, pool, 4)
	require.NoError(t, err)
	require.Equal(t, 1, added, "idempotent: only the missing rack is added")
	racks, total, err := inventory.NewService().ListRacks(ctx, pool, inventory.RackQuery{WithComponents: true})
	require.NoError(t, err)
	require.Equal(t, int32(4), total)
	for _, r := range racks {
		require.Len(t, r.Components, 35)
		bmcs := 0
		for _, c := range r.Components {
			bmcs += len(c.BMCs)
		}
		require.Equal(t, 18*3+9+8, bmcs)
	}
}
