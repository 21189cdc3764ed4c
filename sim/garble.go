package sim

import (
	"encoding/binary"
	"io"
	"net/http"
	"path"
	"strings"
)

// garbage is a reply that no message decodes: field 1, length-delimited,
// claiming more bytes than follow.
var garbage = []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}

// Garble answers a call with bytes that do not decode as its reply when a
// FaultGarbage applies to its method, and otherwise passes it to next. The
// reply is well framed and says OK (gRPC status 0, HTTP 200), so only the
// client's decoding can tell: what a broken proxy or a mismatched proto
// looks like from the caller. Garbled calls are recorded in journal with
// code "garbled".
func Garble(faults *Faults, journal *Journal, clock Clock, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := path.Base(r.URL.Path)
		if r.Method != http.MethodPost || strings.HasPrefix(r.URL.Path, "/admin/") {
			next.ServeHTTP(w, r)
			return
		}
		if _, ok := faults.Take(FaultGarbage, method, ""); !ok {
			next.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		journal.Record(Call{Time: clock.Now(), Method: method, Code: "garbled"})
		ct := r.Header.Get("Content-Type")
		if !strings.HasPrefix(ct, "application/grpc") {
			w.Header().Set("Content-Type", "application/proto")
			_, _ = w.Write(garbage)
			return
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		frame := make([]byte, 5, 5+len(garbage))
		binary.BigEndian.PutUint32(frame[1:], uint32(len(garbage)))
		_, _ = w.Write(append(frame, garbage...))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	})
}
