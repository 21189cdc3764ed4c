package ruledef

import "slices"

// Clone deep-copies d, so callers can't alter shared built-ins.
func (d Definition) Clone() Definition {
	out := Definition{Version: d.Version, Steps: make([]Step, len(d.Steps))}
	for i, s := range d.Steps {
		s.PreOperation = cloneActions(s.PreOperation)
		s.PostOperation = cloneActions(s.PostOperation)
		s.MainOperation = s.MainOperation.clone()
		if s.Retry != nil {
			r := *s.Retry
			s.Retry = &r
		}
		out.Steps[i] = s
	}
	return out
}

func cloneActions(as []Action) []Action {
	if as == nil {
		return nil
	}
	out := make([]Action, len(as))
	for i, a := range as {
		out[i] = a.clone()
	}
	return out
}

func (a Action) clone() Action {
	p := &a.Parameters
	p.Duration = clonePtr(p.Duration)
	p.ExpectedStatus = clonePtr(p.ExpectedStatus)
	p.ComponentTypes = slices.Clone(p.ComponentTypes)
	p.Operation = clonePtr(p.Operation)
	p.PollInterval = clonePtr(p.PollInterval)
	p.PollTimeout = clonePtr(p.PollTimeout)
	p.RequireAll = clonePtr(p.RequireAll)
	return a
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
