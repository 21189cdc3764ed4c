package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

func TestParseAuthProxy(t *testing.T) {
	t.Parallel()
	p, err := ParseAuthProxy("x-forwarded-user", "10.0.0.7, 192.168.4.0/24,::1")
	require.NoError(t, err)
	require.Equal(t, "X-Forwarded-User", p.Header)
	require.Len(t, p.Trusted, 3)

	for _, tt := range []struct{ header, addrs, want string }{
		{"X-User", "", "FLOW_CONSOLE_AUTH_PROXY_ADDRESSES is not"},
		{"", "10.0.0.1", "FLOW_CONSOLE_AUTH_PROXY_HEADER is not"},
		{"X-User", "10.0.0.1,proxy.example", `"proxy.example" is neither`},
		{"X-User", "10.0.0.0/33", `"10.0.0.0/33" is neither`},
	} {
		_, err := ParseAuthProxy(tt.header, tt.addrs)
		require.ErrorContains(t, err, tt.want)
	}
	off, err := ParseAuthProxy("", "")
	require.NoError(t, err)
	require.Empty(t, off.Header)
}

// The proxy's header names the user only on a request from a trusted
// address; from anywhere else it is ignored.
func TestAuthProxyTrustsOnlyItsAddresses(t *testing.T) {
	t.Parallel()
	p, err := ParseAuthProxy("X-Forwarded-User", "10.0.0.7,192.168.4.0/24")
	require.NoError(t, err)
	req := func(remote, user string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/ui/", nil)
		r.RemoteAddr = remote
		if user != "" {
			r.Header.Set("X-Forwarded-User", user)
		}
		return r
	}
	for _, tt := range []struct {
		remote, user, want string
		ok                 bool
	}{
		{"10.0.0.7:5555", "olivia", "olivia", true},
		{"192.168.4.200:5555", "victor", "victor", true},
		{"[::ffff:10.0.0.7]:5555", "olivia", "olivia", true},
		{"10.0.0.8:5555", "mallory", "", false},
		{"192.168.5.1:5555", "mallory", "", false},
		{"10.0.0.7:5555", "", "", false},
		{"in-process", "mallory", "", false},
	} {
		got, ok := p.user(req(tt.remote, tt.user))
		require.Equal(t, tt.ok, ok, tt.remote)
		require.Equal(t, tt.want, got, tt.remote)
	}
	var none AuthProxy
	_, ok := none.user(req("10.0.0.7:1", "olivia"))
	require.False(t, ok, "no proxy configured: the header means nothing")
}

func TestParsePosition(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, row, slot string }{
		{"row-02-pos-03", "02", "03"},
		{"R2-3", "R2", "3"},
		{"B/12", "B", "12"},
		{"row 4, position 7", "4", "7"},
		{"cage-9", "cage", "9"},
		{"A12", "", "A12"},
		{"", "", ""},
	} {
		row, slot := parsePosition(tt.in)
		require.Equal(t, tt.row, row, tt.in)
		require.Equal(t, tt.slot, slot, tt.in)
	}
	require.True(t, natLess("row-9", "row-10"))
	require.False(t, natLess("row-10", "row-9"))
	require.True(t, natLess("hall-1", "hall-2"))
}

// One feed serves every page: it reads once per interval however many
// pages watch, tells a page only about its topics, and reads nothing while
// no page is open.
func TestFeedPublishesChangedTopicsToTheirWatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewDB(t), db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	f := NewFeed(pool, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	defer f.Close()

	time.Sleep(100 * time.Millisecond)
	require.Zero(t, f.Polls(), "no page open: no query")

	var subs []*Subscription
	for range 50 {
		subs = append(subs, f.Subscribe([]string{"schedules"}))
	}
	rules := f.Subscribe([]string{"rules", "bogus"})
	require.Eventually(t, func() bool { return f.Polls() >= 3 }, 10*time.Second, 5*time.Millisecond)

	_, err = pool.Exec(ctx, `INSERT INTO event_rule (name, event_type, enabled, policy) VALUES ('r', 'leak', true, '{"version": 1, "actions": []}')`)
	require.NoError(t, err)
	select {
	case <-rules.C:
		require.Equal(t, []string{"rules"}, rules.Take())
	case <-time.After(10 * time.Second):
		t.Fatal("the rules page heard nothing")
	}
	for _, s := range subs {
		select {
		case <-s.C:
			t.Fatalf("a schedules page heard of %v", s.Take())
		default:
		}
	}
	// Polls grow with time, not with pages: 51 pages, one query a tick.
	p0, t0 := f.Polls(), time.Now()
	time.Sleep(200 * time.Millisecond)
	ticks := float64(time.Since(t0)) / float64(20*time.Millisecond)
	require.LessOrEqual(t, float64(f.Polls()-p0), ticks+2)

	for _, s := range subs {
		f.Unsubscribe(s)
	}
	f.Unsubscribe(rules)
	_, ok := <-rules.C
	require.False(t, ok, "an ended subscription's channel is closed")
}
