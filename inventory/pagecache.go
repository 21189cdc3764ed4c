package inventory

import (
	"container/list"
	"context"
	"encoding/binary"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/db"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Listings at site scale (docs/inventory.md, "Listings at site scale").
//
// A page of GetListOfRacks is built from the database at most
// ListingOptions.Builds at a time, and kept, marshaled, in a cache bounded
// by bytes. A later call for the same page is answered from the cache when
// both of these hold, checked per call:
//
//   - the inventory generation (migration 0180: it grows with every
//     committed write to racks, components, BMCs, NVLink domains or leak
//     status, on any replica) is the one the page was built under;
//   - the page's task-derived fields, which live outside the inventory
//     tables (task stats of its racks and components, leak handling of its
//     components), are what they were when it was built: the same queries
//     the build runs are run again over the page's IDs (two index look-ups
//     over the few unfinished tasks) and compared by a fingerprint.
//
// The generation is read before the page's first query, so a page always
// holds at least what was committed when its generation was read, and any
// later commit makes that generation stale: a reader never gets a page
// older than its own snapshot, and a client that changed the inventory and
// then lists sees its change.

// ListingOptions bound the listings' work and memory.
type ListingOptions struct {
	// Builds is how many GetListOfRacks and GetComponents pages are built
	// from the database at once (FLOW_MAX_CONCURRENT_LISTING_BUILDS); more
	// wait their turn. 0 means no bound.
	Builds int
	// CacheBytes bounds the marshaled GetListOfRacks pages kept
	// (FLOW_LISTING_CACHE_BYTES); 0 turns the cache off.
	CacheBytes int64
	// CheckPool runs a cached page's check of its task-derived fields
	// (nil: the handler's pool). Its statements reach rows by key from the
	// page's 3,600 IDs, so it should be opened with db.PoolConfig's
	// GenericPlans: planned for their values, each of a new connection's
	// first five checks takes 10-35 ms to plan and 0.1 ms to run, and a
	// pool's worth of new connections at once is what made 100 clients
	// starting together wait (docs/inventory.md, "The p99 tail").
	CheckPool *pgxpool.Pool
}

// SetListings applies o. Call it before serving.
func (h *Handler) SetListings(o ListingOptions) {
	h.builds, h.cache, h.checkPool = nil, nil, o.CheckPool
	if h.checkPool == nil {
		h.checkPool = h.pool
	}
	if o.Builds > 0 {
		h.builds = make(chan struct{}, o.Builds)
	}
	if o.CacheBytes > 0 {
		h.cache = newPageCache(o.CacheBytes)
	}
}

// ListingCacheStats returns how many GetListOfRacks pages were answered
// from the page cache and how many were built for it, since start.
func (h *Handler) ListingCacheStats() (hits, misses int64) {
	return h.hits.Load(), h.misses.Load()
}

// ListingJSONEncodes returns how many cached GetListOfRacks pages were
// encoded as JSON for JSON calls since start: once a page, however many
// JSON calls it answers.
func (h *Handler) ListingJSONEncodes() int64 { return h.jsonEncodes.Load() }

// ListingBuildWaits returns how many GetListOfRacks calls since start found
// their page missing or stale while another call was building it, and
// waited for that build instead of building the page again.
func (h *Handler) ListingBuildWaits() int64 { return h.pageBuilds.waits.Load() }

// ListingCheckStats returns how many inventory generation reads and page
// checks (of a cached page's task-derived fields) the GetListOfRacks page
// cache has run since start; concurrent calls share them (freshRead), so
// under load they are fewer than the calls.
func (h *Handler) ListingCheckStats() (genReads, pageChecks int64) {
	return h.genReads.Load(), h.pageChecks.Load()
}

// acquireBuild waits for a build slot (until ctx ends) and returns its
// release.
func (h *Handler) acquireBuild(ctx context.Context) (func(), error) {
	if h.builds == nil {
		return func() {}, nil
	}
	select {
	case h.builds <- struct{}{}:
		return func() { <-h.builds }, nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, context.Cause(ctx))
	}
}

// encoding is how a call's answer is encoded.
type encoding int

const (
	encodingOther  encoding = iota // unknown: built and encoded per call
	encodingBinary                 // binary protobuf: a cached page is sent as it was marshaled
	encodingJSON                   // JSON: a cached page's JSON is sent as it was encoded
)

// callEncoding says how the call is answered: binary protobuf (Connect,
// gRPC or gRPC-Web), JSON (Connect, gRPC or gRPC-Web with +json), or
// something else.
func callEncoding(ctx context.Context) encoding {
	ci, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return encodingOther
	}
	ct := ci.RequestHeader().Get("Content-Type")
	ct, _, _ = strings.Cut(ct, ";")
	switch strings.TrimSpace(strings.ToLower(ct)) {
	case "application/proto", "application/grpc", "application/grpc+proto", "application/grpc-web", "application/grpc-web+proto":
		return encodingBinary
	case "application/json", "application/grpc+json", "application/grpc-web+json":
		return encodingJSON
	}
	return encodingOther
}

// JSONPageField is the field number under which a listing's answer to a
// JSON call carries its page already encoded as JSON: the answer's only
// content is that one unknown field (length-delimited, the JSON document
// as its value), which the server's JSON codec writes as it is instead of
// encoding the message (edge.PreencodedJSONField is the same number; a
// test in app ties them). Protobuf never sends it: a JSON answer is never
// marshaled as protobuf.
const JSONPageField protowire.Number = protowire.MaxValidNumber - 1

// jsonPage returns p's JSON, framed as the unknown field JSONPageField,
// encoding it on the first call for the page (concurrent calls wait for
// that one) and counting it in c's bytes.
func (p *cachedPage) jsonPage(c *pageCache, encodes *atomic.Int64) ([]byte, error) {
	p.jsonOnce.Do(func() {
		encodes.Add(1)
		var res flowv1.GetListOfRacksResponse
		if p.jsonErr = proto.Unmarshal(p.bytes, &res); p.jsonErr != nil {
			return
		}
		doc, err := protojson.MarshalOptions{}.Marshal(&res)
		if err != nil {
			p.jsonErr = err
			return
		}
		framed := protowire.AppendTag(make([]byte, 0, len(doc)+16), JSONPageField, protowire.BytesType)
		framed = protowire.AppendBytes(framed, doc)
		c.addJSON(p, framed)
	})
	return p.json, p.jsonErr
}

// pageCache holds marshaled pages by request, least recently used first
// out, at most max bytes of them.
type pageCache struct {
	max int64

	mu      sync.Mutex
	used    int64
	entries map[string]*list.Element // of *cachedPage
	lru     list.List                // front: most recent
}

// cachedPage is one marshaled page and what decides whether it still holds.
type cachedPage struct {
	key   string
	gen   int64       // inventory generation it was built under
	ids   []uuid.UUID // its racks', then its components' IDs
	racks int         // how many of ids are racks
	dyn   uint64      // fingerprint of its task-derived fields
	bytes []byte
	// check reads the current fingerprint of its task-derived fields,
	// shared among the calls of the page waiting for one (freshRead).
	check freshRead[uint64]
	// json is the page as JSON, framed as the unknown field JSONPageField,
	// once a JSON call asked for it (jsonPage); written under the cache's
	// lock, read after jsonOnce.
	json     []byte
	jsonErr  error
	jsonOnce sync.Once
}

func (p *cachedPage) size() int64 {
	return int64(len(p.bytes)+len(p.json)+len(p.key)+16*len(p.ids)) + 128
}

func newPageCache(max int64) *pageCache {
	return &pageCache{max: max, entries: map[string]*list.Element{}}
}

// get returns the page of key built under gen, or nil.
func (c *pageCache) get(key string, gen int64) *cachedPage {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil
	}
	p := e.Value.(*cachedPage)
	if p.gen != gen {
		return nil
	}
	c.lru.MoveToFront(e)
	return p
}

// put keeps p (replacing any page of its key) unless it alone is over the
// bound, dropping the least recently used pages to stay under it.
func (c *pageCache) put(p *cachedPage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[p.key]; ok {
		old := e.Value.(*cachedPage)
		if old.gen > p.gen {
			return // a newer build got there first
		}
		c.used -= old.size()
		c.lru.Remove(e)
		delete(c.entries, p.key)
	}
	if p.size() > c.max {
		return
	}
	for c.used+p.size() > c.max {
		e := c.lru.Back()
		old := e.Value.(*cachedPage)
		c.used -= old.size()
		c.lru.Remove(e)
		delete(c.entries, old.key)
	}
	c.entries[p.key] = c.lru.PushFront(p)
	c.used += p.size()
}

// addJSON sets p's JSON and counts it, dropping the least recently used
// other pages to stay under the bound, and p itself if it alone is over it
// (its JSON is still answered to the calls that asked).
func (c *pageCache) addJSON(p *cachedPage, framed []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[p.key]
	if !ok || e.Value.(*cachedPage) != p {
		p.json = framed // not (or no longer) kept: nothing to count
		return
	}
	c.used -= p.size()
	p.json = framed
	c.used += p.size()
	for c.used > c.max {
		back := c.lru.Back()
		old := back.Value.(*cachedPage)
		c.used -= old.size()
		c.lru.Remove(back)
		delete(c.entries, old.key)
		if old == p {
			return
		}
	}
}

// dynFingerprint hashes the task-derived fields of a page's racks and
// components (ids: racks first, then components), given as functions of
// the index in ids; entries at their zero value are left out, so the
// fingerprint of a page without unfinished tasks or leak handling is that
// of the empty set.
func dynFingerprint(ids []uuid.UUID, racks int, stats func(i int) TaskStats, handling func(i int) LeakHandling) uint64 {
	h := fnv.New64a()
	var buf [12]byte
	for i, id := range ids {
		st := stats(i)
		var lh LeakHandling
		if i >= racks {
			lh = handling(i)
		}
		if st == (TaskStats{}) && lh == LeakHandlingNone {
			continue
		}
		h.Write(id[:])
		binary.LittleEndian.PutUint32(buf[0:], st.Waiting)
		binary.LittleEndian.PutUint32(buf[4:], st.Pending)
		binary.LittleEndian.PutUint32(buf[8:], st.Running)
		h.Write(buf[:])
		h.Write([]byte(lh))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// pageFingerprint is dynFingerprint of built racks (with their
// components), and the IDs it covers.
func pageFingerprint(racks []Rack) ([]uuid.UUID, uint64) {
	ids := make([]uuid.UUID, 0, len(racks)*36)
	var comps []*Component
	for i := range racks {
		ids = append(ids, racks[i].ID)
	}
	for i := range racks {
		for j := range racks[i].Components {
			ids = append(ids, racks[i].Components[j].ID)
			comps = append(comps, &racks[i].Components[j])
		}
	}
	n := len(racks)
	return ids, dynFingerprint(ids, n,
		func(i int) TaskStats {
			if i < n {
				return racks[i].TaskStats
			}
			return comps[i-n].TaskStats
		},
		func(i int) LeakHandling { return comps[i-n].LeakHandling })
}

// currentFingerprint reads the task-derived fields of the page's IDs as a
// build reads them, and returns their fingerprint.
func (s *Service) currentFingerprint(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID, racks int) (uint64, error) {
	stats, err := s.TaskStats(ctx, dbtx, ids)
	if err != nil {
		return 0, err
	}
	handling := map[uuid.UUID]LeakHandling{}
	if s.leakHandling != nil && racks < len(ids) {
		if handling, err = s.leakHandling(ctx, dbtx, ids[racks:]); err != nil {
			return 0, err
		}
	}
	return dynFingerprint(ids, racks,
		func(i int) TaskStats { return stats[ids[i]] },
		func(i int) LeakHandling { return handling[ids[i]] }), nil
}
