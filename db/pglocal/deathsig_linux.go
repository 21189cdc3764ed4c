package pglocal

import "syscall"

// dieWithParent asks the kernel to send the server SIGINT (PostgreSQL's
// fast shutdown) when the thread that starts it ends; see Cluster.Attached.
// Go sets it after switching to the server user, which would clear it.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }
