package inventory

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExecChunkedSendsEveryRowOnceInChunks(t *testing.T) {
	rows := make([]int, 2*writeChunk+500)
	for i := range rows {
		rows[i] = i
	}
	var sizes []int
	var seen []int
	n, err := execChunked(rows, func(data []byte) (int64, error) {
		var chunk []int
		require.NoError(t, json.Unmarshal(data, &chunk))
		sizes = append(sizes, len(chunk))
		seen = append(seen, chunk...)
		return int64(len(chunk)), nil
	})
	require.NoError(t, err)
	require.EqualValues(t, len(rows), n)
	require.Equal(t, []int{writeChunk, writeChunk, 500}, sizes)
	require.Equal(t, rows, seen)

	calls := 0
	_, err = execChunked(rows, func([]byte) (int64, error) {
		calls++
		return 0, errors.New("boom")
	})
	require.EqualError(t, err, "boom")
	require.Equal(t, 1, calls, "the first failure stops the write")

	n, err = execChunked([]int(nil), func([]byte) (int64, error) { t.Fatal("no rows, no statement"); return 0, nil })
	require.NoError(t, err)
	require.Zero(t, n)
}
