package db

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Connections to a server that stops answering (issue 46).
//
// A PostgreSQL server that freezes (SIGSTOP past Patroni's TTL, a hung
// host) or whose host drops off the network keeps its TCP connections
// open: pgx waits on them for as long as each statement's context lets it,
// and a connection attempt waits forever, since pgx sets no connect
// timeout unless the URL does. With a multi-host URL a frozen first host
// then holds every new connection, and the pool's slot, for the whole
// freeze, though the next host is the new primary (pgx moves on to the
// next host only when an attempt fails). So every pool gets:
//
//   - a connect timeout (defaultConnectTimeout) per host attempt, unless
//     the URL sets connect_timeout;
//   - TCP keepalives every keepAliveInterval after keepAliveIdle idle,
//     keepAliveCount unanswered probes closing the connection, and
//     TCP_USER_TIMEOUT (userTimeout, Linux) closing one whose sent data
//     goes unacknowledged that long: a dead or partitioned host is found
//     in tens of seconds, not the kernel's default 2 hours (keepalive) or
//     15 minutes (retransmissions).
//
// A frozen process on a live host is not found by either (its kernel
// acknowledges the data and answers the probes): only the statements'
// own deadlines bound those waits, which is why the engine bounds each
// of a step job's statements (engine.stmtTimeout).
const (
	defaultConnectTimeout = 5 * time.Second
	keepAliveIdle         = 10 * time.Second
	keepAliveInterval     = 5 * time.Second
	keepAliveCount        = 3
	userTimeout           = 30 * time.Second
)

// tuneDial sets pc's connect timeout (unless the URL set one) and its
// dialer's keepalives and user timeout.
func tuneDial(pc *pgxpool.Config) {
	cc := &pc.ConnConfig.Config
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = defaultConnectTimeout
	}
	d := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
		},
		Control: setUserTimeout,
	}
	cc.DialFunc = d.DialContext
}
