package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DemoRack returns demo rack number i (0 ≤ i < 65536) in the GB200 NVL72
// shape: 18 compute trays, each with a host BMC and two DPU BMCs; 9 NVLink
// switch trays and 8 power shelves, each with one BMC. Serial numbers,
// names and MAC addresses are unique per i and stable, so `flow dev --seed`
// and the simulators can be seeded from the same data. MACs are locally
// administered: 02:<i high>:<i low>:<type>:<index>:<bmc>.
//
// Slots, top to bottom: power shelves 1-4, compute trays 5-14, switch trays
// 15-23, compute trays 24-31, power shelves 32-35.
func DemoRack(i int) Rack {
	hi, lo := byte(i>>8), byte(i)
	mac := func(kind, idx, bmc byte) MAC {
		return MAC(fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", hi, lo, kind, idx, bmc))
	}
	model := func(s string) *string { return &s }
	r := Rack{
		Name:         fmt.Sprintf("demo-%04d", i),
		Manufacturer: "Wiwynn",
		SerialNumber: fmt.Sprintf("DEMO-RACK-%05d", i),
		Model:        model("GB200 NVL72"),
		Location: Location{
			Region:     "demo",
			Datacenter: "dc1",
			Room:       fmt.Sprintf("hall-%d", i/100),
			Position:   fmt.Sprintf("row-%02d-pos-%02d", (i%100)/10, i%10),
		},
	}
	add := func(t ComponentType, kind byte, idx int, slot int32, prefix, manufacturer, m, fw string, bmcs []BMC) {
		r.Components = append(r.Components, Component{
			Type:            t,
			Name:            fmt.Sprintf("%s-%s-%02d", r.Name, prefix, idx),
			Manufacturer:    manufacturer,
			SerialNumber:    fmt.Sprintf("DEMO%05d%s%02d", i, prefix, idx),
			Model:           model(m),
			FirmwareVersion: fw,
			Position:        Position{SlotID: slot, TrayIdx: int32(idx)},
			BMCs:            bmcs,
		})
	}
	shelf := 0
	addShelves := func(first int32) {
		for k := int32(0); k < 4; k++ {
			add(ComponentTypePowerShelf, 3, shelf, first+k, "ps", "Delta", "GB200 Power Shelf", "PS 3.1.0",
				[]BMC{{Type: BMCTypeHost, MAC: mac(3, byte(shelf), 0)}})
			shelf++
		}
	}
	compute := 0
	addCompute := func(first int32, n int) {
		for k := 0; k < n; k++ {
			add(ComponentTypeCompute, 1, compute, first+int32(k), "ct", "Wiwynn", "GB200 Compute Tray", "FW 1.2.00GA", []BMC{
				{Type: BMCTypeHost, MAC: mac(1, byte(compute), 0)},
				{Type: BMCTypeDPU, MAC: mac(1, byte(compute), 1)},
				{Type: BMCTypeDPU, MAC: mac(1, byte(compute), 2)},
			})
			compute++
		}
	}
	addShelves(1)
	addCompute(5, 10)
	for k := 0; k < 9; k++ {
		add(ComponentTypeNVSwitch, 2, k, 15+int32(k), "sw", "NVIDIA", "GB200 NVLink Switch Tray", "NVOS 25.02",
			[]BMC{{Type: BMCTypeHost, MAC: mac(2, byte(k), 0)}})
	}
	addCompute(24, 8)
	addShelves(32)
	return r
}

// CreateDemoRacks stores demo racks 0…n-1 (DemoRack), each in a
// transaction of its own, over workers transactions at once: how
// benchmarks seed a site of thousands of racks. It stops at the first
// error (wrapped with the rack's index); racks stored until then stay.
func (s *Service) CreateDemoRacks(ctx context.Context, pool *pgxpool.Pool, n, workers int) error {
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := s.CreateRack(ctx, tx, DemoRack(i))
					return err
				})
				if err != nil {
					errs[w] = fmt.Errorf("demo rack %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
