package edge

import (
	"bytes"
	"compress/gzip"
	"container/list"
	"hash/maphash"
	"io"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// Large answers are compressed once (issue 49). A listing page answered
// from the listing cache is the same bytes for every caller until it
// changes, and gzip is what it costs most to send: ~2.3 MB of JSON (a page
// of 100 racks with components) is tens of milliseconds of CPU to
// compress, against well under one to copy. The server's gzip compressor
// remembers the compressed form of the large answers it compressed, keyed
// by a 128-bit keyed hash of the uncompressed bytes and their length, and
// sends that again for the same bytes. Connect hands each answer to the
// compressor in one Write (bytes.Buffer.WriteTo), so the whole answer is
// hashed, never a part.

// gzipMemoMinBytes is the smallest answer whose compressed form is
// remembered; smaller ones are compressed every time.
const gzipMemoMinBytes = 64 << 10

// gzipMemoMaxBytes bounds the compressed answers remembered, least
// recently used out first.
const gzipMemoMaxBytes = 32 << 20

// gzipMemo is the compressed-answer memory of one server.
type gzipMemo struct {
	seed1, seed2 maphash.Seed
	max          int

	mu      sync.Mutex
	used    int
	entries map[memoKey]*list.Element // of *memoEntry
	lru     list.List                 // front: most recent

	hits, stores atomic.Int64
}

type memoKey struct {
	h1, h2 uint64
	n      int
}

type memoEntry struct {
	key memoKey
	gz  []byte
}

func newGzipMemo(max int) *gzipMemo {
	return &gzipMemo{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), max: max, entries: map[memoKey]*list.Element{}}
}

func (m *gzipMemo) key(p []byte) memoKey {
	return memoKey{h1: maphash.Bytes(m.seed1, p), h2: maphash.Bytes(m.seed2, p), n: len(p)}
}

func (m *gzipMemo) get(k memoKey) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[k]
	if !ok {
		return nil, false
	}
	m.lru.MoveToFront(e)
	m.hits.Add(1)
	return e.Value.(*memoEntry).gz, true
}

func (m *gzipMemo) put(k memoKey, gz []byte) {
	if len(gz) > m.max {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[k]; ok {
		return
	}
	for m.used+len(gz) > m.max {
		e := m.lru.Back()
		old := e.Value.(*memoEntry)
		m.used -= len(old.gz)
		m.lru.Remove(e)
		delete(m.entries, old.key)
	}
	m.entries[k] = m.lru.PushFront(&memoEntry{key: k, gz: gz})
	m.used += len(gz)
	m.stores.Add(1)
}

// compressor returns a Connect gzip compressor that uses m.
func (m *gzipMemo) compressor() connect.Compressor {
	return &memoGzip{memo: m, gz: gzip.NewWriter(io.Discard)}
}

// memoGzip is a gzip compressor that answers a large payload it compressed
// before from its memo.
type memoGzip struct {
	memo  *gzipMemo
	gz    *gzip.Writer
	dst   io.Writer
	wrote bool          // a Write came since Reset
	sent  bool          // the last Write was answered from the memo
	key   memoKey       // of the first Write, when tee is set
	tee   *bytes.Buffer // the compressed stream of a large first Write, for the memo
}

func (c *memoGzip) Reset(w io.Writer) {
	c.dst, c.wrote, c.sent, c.tee = w, false, false, nil
	c.gz.Reset(w)
}

func (c *memoGzip) Write(p []byte) (int, error) {
	first := !c.wrote
	c.wrote = true
	if first && len(p) >= gzipMemoMinBytes {
		c.key = c.memo.key(p)
		if gz, ok := c.memo.get(c.key); ok {
			c.sent = true
			if _, err := c.dst.Write(gz); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		c.tee = &bytes.Buffer{}
		c.gz.Reset(io.MultiWriter(c.dst, c.tee))
	} else if !first {
		// More than the one answer: the memo's key would not cover it.
		c.tee = nil
		if c.sent {
			// After a remembered stream, a new gzip member (readers
			// take concatenated members as one stream).
			c.gz.Reset(c.dst)
		}
	}
	c.sent = false
	return c.gz.Write(p)
}

func (c *memoGzip) Close() error {
	if c.sent {
		return nil
	}
	if err := c.gz.Close(); err != nil {
		return err
	}
	if c.tee != nil {
		c.memo.put(c.key, bytes.Clone(c.tee.Bytes()))
		c.tee = nil
	}
	return nil
}
