package psmsim

import (
	"encoding/json"
	"fmt"
	"time"

	psmv1 "github.com/nicoflow/flow/proto/gen/psm/v1"
)

// The simulator's state as a file (flow dev keeps it in its state folder
// across restarts): shelves with their registration, PSU power, power
// changes and firmware jobs in progress. Faults and the journal are not
// kept.

type stateFile struct {
	Version int          `json:"version"`
	Shelves []shelfState `json:"shelves"`
}

type shelfState struct {
	Shelf      Shelf                 `json:"shelf"`
	Registered time.Time             `json:"registered,omitzero"`
	PSUs       []bool                `json:"psus"`
	Steps      []stepState           `json:"steps,omitempty"`
	Jobs       map[int32]jobStateRow `json:"jobs,omitempty"` // by PowershelfComponent
}

type stepState struct {
	At time.Time `json:"at"`
	On []bool    `json:"on"`
}

type jobStateRow struct {
	Target    string    `json:"target"`
	Created   time.Time `json:"created"`
	Stuck     string    `json:"stuck,omitempty"`
	FailPhase string    `json:"fail_phase,omitempty"`
	Applied   bool      `json:"applied,omitempty"`
}

// MarshalState returns the simulator's state (see RestoreState).
func (s *Sim) MarshalState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := stateFile{Version: 1}
	for _, sh := range s.shelves {
		ss := shelfState{Shelf: sh.Shelf, Registered: sh.registered, PSUs: sh.psus}
		for _, st := range sh.steps {
			ss.Steps = append(ss.Steps, stepState{At: st.at, On: st.on})
		}
		if len(sh.jobs) > 0 {
			ss.Jobs = map[int32]jobStateRow{}
			for c, j := range sh.jobs {
				ss.Jobs[int32(c)] = jobStateRow{Target: j.target, Created: j.created, Stuck: j.stuck, FailPhase: j.failPhase, Applied: j.applied}
			}
		}
		f.Shelves = append(f.Shelves, ss)
	}
	return json.Marshal(f)
}

// RestoreState replaces the simulator's shelves with a state MarshalState
// returned: power changes and firmware jobs in progress go on from where
// they were (their times are absolute).
func (s *Sim) RestoreState(data []byte) error {
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("psmsim: restore state: %w", err)
	}
	if f.Version != 1 {
		return fmt.Errorf("psmsim: restore state: unknown version %d", f.Version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shelves = nil
	clear(s.macIndex)
	for _, ss := range f.Shelves {
		if ss.Shelf.MAC == "" {
			return fmt.Errorf("psmsim: restore state: a shelf has no PMC MAC")
		}
		sh := &shelf{Shelf: ss.Shelf, registered: ss.Registered, psus: ss.PSUs, jobs: map[psmv1.PowershelfComponent]*job{}}
		for _, st := range ss.Steps {
			sh.steps = append(sh.steps, step{at: st.At, on: st.On})
		}
		for c, j := range ss.Jobs {
			sh.jobs[psmv1.PowershelfComponent(c)] = &job{target: j.Target, created: j.Created, stuck: j.Stuck, failPhase: j.FailPhase, applied: j.Applied}
		}
		s.macIndex[norm(sh.MAC)] = len(s.shelves)
		s.shelves = append(s.shelves, sh)
	}
	return nil
}
