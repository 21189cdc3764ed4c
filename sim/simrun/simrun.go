// Package simrun serves the NICo Core and PSM simulators side by side, as
// one fleet: flow simulate, flow dev and flow bench start them through it.
package simrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/psmsim"
)

// Simulators are the NICo Core and PSM simulators and their servers.
type Simulators struct {
	NICo       *nicosim.Sim
	PSM        *psmsim.Sim
	NICoServer *sim.Server
	PSMServer  *sim.Server
}

// Options tune Start.
type Options struct {
	NICoAddr, PSMAddr string    // "127.0.0.1:0" picks free ports
	Clock             sim.Clock // nil: wall clock
	PowerDelay        time.Duration
	FirmwarePhase     time.Duration // firmware jobs, ingestion and decommission steps
}

// Start serves both simulators on their addresses until Close.
func Start(o Options) (*Simulators, error) {
	s := &Simulators{
		NICo: nicosim.New(nicosim.Options{Clock: o.Clock, PowerDelay: o.PowerDelay, FirmwarePhase: o.FirmwarePhase, IngestionStep: o.FirmwarePhase, DecommissionStep: o.FirmwarePhase}),
		PSM:  psmsim.New(psmsim.Options{Clock: o.Clock, PowerDelay: o.PowerDelay, JobStep: o.FirmwarePhase}),
	}
	var err error
	if s.NICoServer, err = sim.Listen(o.NICoAddr, s.NICo.Handler()); err != nil {
		return nil, fmt.Errorf("NICo Core simulator: %w", err)
	}
	if s.PSMServer, err = sim.Listen(o.PSMAddr, s.PSM.Handler()); err != nil {
		_ = s.NICoServer.Close(context.Background())
		return nil, fmt.Errorf("PSM simulator: %w", err)
	}
	return s, nil
}

// Seed puts devices into the Core simulator and their power shelves, keyed
// by PMC MAC, into the PSM simulator, so both backends see one fleet.
func (s *Simulators) Seed(devs []nicosim.Device) error {
	var shelves []psmsim.Shelf
	for _, d := range devs {
		if d.Kind == nicosim.KindPowerShelf {
			shelves = append(shelves, psmsim.Shelf{MAC: d.BMCMAC, IP: d.BMCIP, ChassisSerial: d.Serial, Firmware: d.Firmware["pmc"], PoweredOff: d.PoweredOff})
		}
	}
	if err := s.NICo.Seed(devs); err != nil {
		return err
	}
	return s.PSM.Seed(shelves)
}

// Close stops both servers, waiting up to ctx for in-flight calls.
func (s *Simulators) Close(ctx context.Context) error {
	return errors.Join(s.NICoServer.Close(ctx), s.PSMServer.Close(ctx))
}
