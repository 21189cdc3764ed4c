//go:build !linux

package pglocal

import "syscall"

// dieWithParent does nothing: only Linux signals a child when its parent
// dies (see Cluster.Attached).
func dieWithParent(*syscall.SysProcAttr) {}
