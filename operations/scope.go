package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
)

// taskScope is a task's frozen scope, decoded: its components by type (in
// the order of their backend identifiers) and its targets by type. A task's
// scope is written once, at submit, and never changed, so a process may
// keep it as long as it likes.
type taskScope struct {
	components map[ComponentType][]uuid.UUID
	targets    map[ComponentType]typeTargets
}

func decodeScope(id uuid.UUID, components, targets []byte) (*taskScope, error) {
	s := &taskScope{}
	if err := errors.Join(json.Unmarshal(components, &s.components), json.Unmarshal(targets, &s.targets)); err != nil {
		return nil, fmt.Errorf("decode task %s: %w", id, err)
	}
	return s, nil
}

// batch returns the UUIDs of the components of type ct that targets name
// (a call's batch), in targets' order.
func (s *taskScope) batch(ct ComponentType, targets []string) []uuid.UUID {
	ids, comps := s.targets[ct].IDs, s.components[ct]
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	out := make([]uuid.UUID, 0, len(targets))
	for _, t := range targets {
		if i, ok := index[t]; ok && i < len(comps) {
			out = append(out, comps[i])
		}
	}
	return out
}

// scopeCacheSize bounds scopeCache: a scope is a few KB (35 components),
// and it is read again only while its task runs.
const scopeCacheSize = 2048

// scopeCache keeps the scopes of the tasks this process runs, so each
// readiness check of a task's calls (one per batch of every disruptive
// step) reads and decodes its scope once instead of every time. It forgets
// the oldest entry first once full.
type scopeCache struct {
	mu    sync.Mutex
	m     map[uuid.UUID]*taskScope
	order []uuid.UUID // insertion order, a ring once full
	next  int
}

func (c *scopeCache) get(id uuid.UUID) (*taskScope, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[id]
	return s, ok
}

// load decodes a task's scope as read from its row and keeps it.
func (c *scopeCache) load(id uuid.UUID, components, targets []byte) (*taskScope, error) {
	s, err := decodeScope(id, components, targets)
	if err == nil {
		c.put(id, s)
	}
	return s, err
}

func (c *scopeCache) put(id uuid.UUID, s *taskScope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[uuid.UUID]*taskScope)
	}
	if _, ok := c.m[id]; ok {
		return
	}
	if len(c.order) < scopeCacheSize {
		c.order = append(c.order, id)
	} else {
		delete(c.m, c.order[c.next])
		c.order[c.next] = id
		c.next = (c.next + 1) % scopeCacheSize
	}
	c.m[id] = s
}
