//go:build unix && !linux

package main

import (
	"fmt"
	"syscall"
)

// Outside Linux there is neither a PID namespace sentinel can use nor a
// cgroup, nor a parent-death signal: the tree is held by its process group
// (best effort), and the supervisor learns of sentinel's death from the
// control pipe's end of file. A supervisor killed itself leaves the
// command's group to sentinel, which kills it before releasing; both
// killed, nothing stops it.

// boxes lists the ways to hold the tree that mode allows.
func boxes(string) []func() (box, error) {
	return []func() (box, error){func() (box, error) { return groupBox{}, nil }}
}

// containModes are the containments this platform has (besides auto).
var containModes = []string{containGroup}

func newTree(arg string) (tree, error) {
	if arg != containGroup {
		return nil, fmt.Errorf("unknown containment %q", arg)
	}
	return &groupTree{}, nil
}

func (groupBox) attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func becomeSubreaper() {}
