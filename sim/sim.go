// Package sim holds what the NICo Core and PSM simulators share: an
// injectable clock, a journal of received calls, fault injection, the admin
// HTTP/JSON surface and plaintext HTTP/2 serving. The simulators themselves
// live under it, in sim/nicosim and sim/psmsim, and sim/simrun runs both.
package sim

import (
	"sync"
	"time"
)

// Clock tells the simulators the time. Every timed transition (power
// changes, firmware jobs, ingestion, decommission) is computed from Now when
// a call reads the device, so a FakeClock drives them without any sleeping.
type Clock interface {
	Now() time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// FakeClock is a Clock that only moves when told to. It is safe for
// concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the fake time forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
