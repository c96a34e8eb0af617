//go:build unix && !linux

package main

import "syscall"

// Outside Linux there is no parent-death signal: the supervisor learns of
// sentinel's death from the control pipe's end of file (best effort: a
// supervisor that is killed itself leaves the command's group running).

func supervisorAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func becomeSubreaper() {}
