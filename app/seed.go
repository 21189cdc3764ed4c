package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/inventory"
)

// maxSeed bounds `flow dev --seed` (the demo MAC scheme allows 65536 racks).
const maxSeed = 65536

// seedDemoRacks makes sure demo racks 0..n-1 (inventory.DemoRack) exist and
// returns how many it added. Racks already there (by serial number) are left
// alone, so a restart with the same --seed adds nothing.
func seedDemoRacks(ctx context.Context, pool *pgxpool.Pool, n int) (int, error) {
	if n > maxSeed {
		return 0, usageError(fmt.Errorf("--seed must be at most %d", maxSeed))
	}
	svc := inventory.NewService()
	added := 0
	for i := 0; i < n; i++ {
		r := inventory.DemoRack(i)
		_, err := svc.RackBySerial(ctx, pool, r.Manufacturer, r.SerialNumber, false)
		if err == nil {
			continue
		}
		if !errors.Is(err, inventory.ErrRackNotFound) {
			return added, err
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := svc.CreateRack(ctx, tx, r)
			return err
		})
		if err != nil {
			return added, fmt.Errorf("demo rack %d: %w", i, err)
		}
		added++
	}
	return added, nil
}
