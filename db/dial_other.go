//go:build !linux

package db

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
