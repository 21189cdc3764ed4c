package pglocal

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Lock is an advisory file lock (flock) held for the life of the process; the
// kernel releases it when the process exits, however it exits.
type Lock struct{ f *os.File }

// LockExclusive takes an exclusive, non-blocking lock on path and records the
// holder's PID in it. It returns an error wrapping ErrLocked, naming the
// holder, when another process has it.
func LockExclusive(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("%w (held by pid %s)", ErrLocked, string(bytes.TrimSpace(pid)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &Lock{f: f}, nil
}

// LockShared takes a shared lock on path, blocking until no exclusive holder
// remains.
func LockShared(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// LockBlocking takes an exclusive lock on path, waiting for it.
func LockBlocking(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
