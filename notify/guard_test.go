package notify_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/notify"
)

// TestGuardURL: outside dev mode only https, and literal internal
// addresses only when the allow-list names them.
func TestGuardURL(t *testing.T) {
	t.Parallel()
	prod := notify.Guard{}
	dev := notify.Guard{DevMode: true}
	allowed := notify.Guard{Allow: []string{"10.0.0.0/8", "127.0.0.1"}}
	for _, tt := range []struct {
		name string
		g    notify.Guard
		url  string
		ok   bool
	}{
		{"HTTPS", prod, "https://hooks.example.com/flow", true},
		{"HTTPOutsideDev", prod, "http://hooks.example.com/flow", false},
		{"HTTPInDev", dev, "http://127.0.0.1:9000/flow", true},
		{"Loopback", prod, "https://127.0.0.1/flow", false},
		{"LoopbackV6", prod, "https://[::1]/flow", false},
		{"LinkLocal", prod, "https://169.254.169.254/latest/meta-data", false},
		{"Private", prod, "https://10.1.2.3/flow", false},
		{"PrivateAllowed", allowed, "https://10.1.2.3/flow", true},
		{"LoopbackAllowed", allowed, "https://127.0.0.1:8443/flow", true},
		{"PrivateInDev", dev, "https://192.168.1.2/flow", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.g.CheckURL("url", tt.url)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "url", fe.Field)
		})
	}
}

// TestGuardDial: a name that resolves to an internal address is refused
// at dial time, unless allowed.
func TestGuardDial(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx := context.Background()
	_, err = notify.Guard{}.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
	require.ErrorIs(t, err, notify.ErrRefused)
	for _, g := range []notify.Guard{{DevMode: true}, {Allow: []string{"127.0.0.0/8", "::1"}}, {Allow: []string{"localhost"}}} {
		c, err := g.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
		require.NoError(t, err, "%+v", g)
		c.Close()
	}
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	got, err := notify.ParseAllow(" 10.0.0.0/8, alerts.internal ,192.168.1.5,")
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "alerts.internal", "192.168.1.5"}, got)
	_, err = notify.ParseAllow("10.0.0.0/33")
	require.Error(t, err)
}
