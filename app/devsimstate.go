package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// devSimStateFile is where flow dev keeps its simulators' state (devices,
// power, firmware jobs in progress) in its state folder, so a restart finds
// the simulated hardware as it left it: a firmware step in flight resumes
// polling a job the simulator still knows.
const devSimStateFile = "simulators.json"

type simStateFile struct {
	NICo json.RawMessage `json:"nico"`
	PSM  json.RawMessage `json:"psm"`
}

// loadSimState restores sims from dir's state file and reports whether
// there was one.
func loadSimState(dir string, sims *simulators) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, devSimStateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	var f simStateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(dir, devSimStateFile), err)
	}
	if err := sims.nico.RestoreState(f.NICo); err != nil {
		return false, err
	}
	if err := sims.psm.RestoreState(f.PSM); err != nil {
		return false, err
	}
	return true, nil
}

// saveSimState writes sims' state into dir's state file (through a
// temporary file and a rename, so a crash leaves the old or the new one).
func saveSimState(dir string, sims *simulators) error {
	var f simStateFile
	var err error
	if f.NICo, err = sims.nico.MarshalState(); err != nil {
		return err
	}
	if f.PSM, err = sims.psm.MarshalState(); err != nil {
		return err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, devSimStateFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
