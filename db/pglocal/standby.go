package pglocal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Streaming replication, for tests of a failover: a standby cloned from a
// running primary, following it, and promoted to take writes.

// InitStandby makes DataDir a streaming standby of primary (which must be
// running): pg_basebackup of it, with standby.signal and a primary_conninfo
// naming this standby appName (the name synchronous_standby_names
// matches). Start then runs it as a hot standby that accepts reads. The
// default pg_hba.conf of initdb lets a local replication connection in.
func (c *Cluster) InitStandby(ctx context.Context, primary *Cluster, appName string) error {
	if c.Initialized() {
		return fmt.Errorf("pglocal: %s already holds a cluster", c.DataDir)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("pglocal: create data folder: %w", err)
	}
	if err := c.handOver(c.DataDir); err != nil {
		return err
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, appName)
	out, err := c.command(ctx, "pg_basebackup", "-D", c.DataDir, "-d", conn, "-X", "stream", "-R", "--no-sync", "-c", "fast").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pglocal: pg_basebackup: %w: %s", err, lastLines(out, 5))
	}
	// The primary's log file came along; this cluster writes its own.
	_ = os.Remove(filepath.Join(c.DataDir, "postgres.log"))
	return nil
}

// Promote makes a running standby a primary that takes writes (pg_ctl
// promote) and waits until it does.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.command(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", c.DataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pglocal: promote: %w: %s", err, lastLines(out, 3))
	}
	return nil
}
