package edge

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// compress runs c as Connect does: Reset to the sink, the whole payload in
// one Write (bytes.Buffer.WriteTo), Close.
func compress(t *testing.T, c interface {
	io.Writer
	Reset(io.Writer)
	Close() error
}, payload []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	c.Reset(&out)
	_, err := bytes.NewBuffer(payload).WriteTo(c)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	return out.Bytes()
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	return out
}

// TestGzipMemo: a large answer compressed twice is compressed once (the
// second time from the memo, the same bytes); another answer of the same
// length is not mistaken for it; small answers are never remembered; a
// second Write after a remembered answer starts a new gzip member, and the
// stream still reads as both writes; the memo stays within its bound.
func TestGzipMemo(t *testing.T) {
	t.Parallel()
	memo := newGzipMemo(1 << 20)
	c := memo.compressor().(*memoGzip)
	page := bytes.Repeat([]byte(`{"racks":[{"name":"demo-0001"}]}`), 4<<10) // 128 KiB
	first := compress(t, c, page)
	require.Equal(t, page, gunzip(t, first))
	require.EqualValues(t, [2]int64{0, 1}, [2]int64{memo.hits.Load(), memo.stores.Load()})
	again := compress(t, memo.compressor(), page)
	require.Equal(t, first, again, "the remembered stream")
	require.EqualValues(t, 1, memo.hits.Load())

	other := bytes.Clone(page)
	other[len(other)/2] = 'X'
	out := compress(t, c, other)
	require.Equal(t, other, gunzip(t, out))
	require.EqualValues(t, [2]int64{1, 2}, [2]int64{memo.hits.Load(), memo.stores.Load()}, "same length, other bytes: compressed and kept apart")

	small := []byte(`{"total":3}`)
	require.Equal(t, small, gunzip(t, compress(t, c, small)))
	require.Equal(t, small, gunzip(t, compress(t, c, small)))
	require.EqualValues(t, [2]int64{1, 2}, [2]int64{memo.hits.Load(), memo.stores.Load()}, "small answers are not remembered")

	// Two writes: the first answered from the memo, the second a new member.
	var buf bytes.Buffer
	c.Reset(&buf)
	_, err := c.Write(page)
	require.NoError(t, err)
	_, err = c.Write(small)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.Equal(t, append(bytes.Clone(page), small...), gunzip(t, buf.Bytes()))

	// The bound: distinct pages push the oldest out.
	small3 := newGzipMemo(len(first)*3 + len(first)/2)
	c3 := small3.compressor()
	for i := range 10 {
		p := bytes.Clone(page)
		p[0] = byte(i)
		require.Equal(t, p, gunzip(t, compress(t, c3, p)))
	}
	small3.mu.Lock()
	defer small3.mu.Unlock()
	require.LessOrEqual(t, small3.used, small3.max)
	require.Len(t, small3.entries, 3)
	require.EqualValues(t, 10, small3.stores.Load())
}
