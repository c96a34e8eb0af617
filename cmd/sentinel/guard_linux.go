package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// On Linux the command's tree is held, in this order of preference
// (--contain auto):
//
//  1. a PID namespace whose init is the supervisor (CLONE_NEWPID; with a
//     user namespace, CLONE_NEWUSER, when that is what lets an
//     unprivileged user create one). When the init of a PID namespace
//     dies, however it dies, the kernel SIGKILLs every process in the
//     namespace and reaps the init only once all of them are gone
//     (zap_pid_ns_processes, kernel/pid_namespace.c: "when the init
//     process of a pid namespace is reaped all of the processes in the
//     pid namespace are gone"). The supervisor's parent-death signal is
//     SIGKILL: sentinel's death, too, empties the namespace in the kernel.
//  2. a cgroup v2 of its own under sentinel's cgroup, where namespaces are
//     refused and that cgroup is delegated (writable): the supervisor
//     starts in it (CLONE_INTO_CGROUP), the command in a child cgroup;
//     cgroup.kill empties either at once, and nothing started inside can
//     leave it (only a process allowed to write cgroup.procs above it can).
//  3. the process group (best effort), with a warning at start.

// boxes lists the ways to hold the tree that mode allows, strongest first.
func boxes(mode string) []func() (box, error) {
	pidns := []func() (box, error){}
	if os.Geteuid() == 0 { // CAP_SYS_ADMIN, unless a container took it
		pidns = append(pidns, func() (box, error) { return pidnsBox{}, nil })
	}
	pidns = append(pidns, func() (box, error) { return pidnsBox{user: true}, nil })
	cgroup := func() (box, error) { return newCgroupBox() }
	group := func() (box, error) { becomeSubreaper(); return groupBox{}, nil }
	switch mode {
	case containPIDNS:
		return pidns
	case containCgroup:
		return []func() (box, error){cgroup}
	case containGroup:
		return []func() (box, error){group}
	}
	return append(pidns, cgroup, group)
}

// containModes are the containments this platform has (besides auto).
var containModes = []string{containPIDNS, containCgroup, containGroup}

// newTree is the supervisor's side of box.arg.
func newTree(arg string) (tree, error) {
	switch {
	case arg == containPIDNS:
		// kill(-1) reaches every process the caller may signal: only as
		// the init of a namespace of its own is that the command's tree.
		if os.Getpid() != 1 {
			return nil, fmt.Errorf("told to run as the init of a PID namespace, but its PID is %d", os.Getpid())
		}
		if err := mountProc(); err != nil {
			// Still contained; only what reads /proc is confused.
			fmt.Fprintf(os.Stderr, "sentinel: warning: no /proc of its own for the command's PID namespace (%v): ps and tools reading /proc see the host's processes\n", err)
		}
		return nsTree{}, nil
	case len(arg) > len(containCgroup)+1 && arg[:len(containCgroup)+1] == containCgroup+"=":
		return openCgroupTree(arg[len(containCgroup)+1:])
	case arg == containGroup:
		return &groupTree{}, nil
	}
	return nil, fmt.Errorf("unknown containment %q", arg)
}

// commandAttr is the command's process attributes: a process group of its
// own (out of the terminal's foreground: its job control goes through the
// supervisor), and SIGKILL should the supervisor die.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes the orphans of the process's descendants its
// children, so it can reap them and tell when a tree is empty: the
// supervisor for the command's tree, and sentinel when only a process
// group holds the tree and the supervisor may die before it.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// attr: SIGTERM should sentinel die (the control pipe's end says so too):
// the supervisor then kills the group itself.
func (groupBox) attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// pidnsBox runs the supervisor as the init of a new PID namespace.
type pidnsBox struct{ user bool }

func (pidnsBox) name() string { return containPIDNS }
func (pidnsBox) arg() string  { return containPIDNS }
func (b pidnsBox) attr() *syscall.SysProcAttr {
	// A mount namespace too, for a /proc of the PID namespace's own
	// (mountProc): ps and every tool reading /proc see the tree as it is.
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if b.user {
		// The user keeps its own IDs inside (files it writes are its
		// own); it gains no privilege outside the namespaces. The
		// supervisor keeps CAP_SYS_ADMIN (of its user namespace only)
		// across its exec to mount /proc, and drops it before the
		// command starts.
		uid, gid := os.Geteuid(), os.Getegid()
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.AmbientCaps = []uintptr{capSysAdmin}
	}
	return a
}

// From <linux/capability.h> and <linux/prctl.h>.
const (
	capSysAdmin             = 21
	prCapAmbient            = 47
	prCapAmbientClearAll    = 4
	linuxCapabilityVersion3 = 0x20080522
)

// dropCaps clears the supervisor's (this thread's) capabilities when it
// runs in a user namespace of its own as an unprivileged user: the
// ambient set it was started with, and the permitted, effective and
// inheritable sets, so the command starts with none. As root (no user
// namespace) the command keeps root's, as it would without sentinel.
func dropCaps() {
	if os.Getuid() == 0 {
		return
	}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0, 0, 0, 0)
	hdr := struct {
		version uint32
		pid     int32
	}{version: linuxCapabilityVersion3}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	_, _, _ = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// mountProc gives the supervisor's mount namespace a /proc of its PID
// namespace, after making every mount a slave (nothing mounted here
// reaches the host), then drops the capabilities it had for that
// (dropCaps). The supervisor runs on one locked OS thread (capabilities
// are a thread's), which is also the one that starts the command.
func mountProc() error {
	defer dropCaps()
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// drain has nothing to do: the supervisor could be waited for only once
// the kernel had emptied its namespace.
func (pidnsBox) drain(int, func()) {}
func (pidnsBox) close()            {}
func (pidnsBox) afterDeath() string {
	return "the kernel killed every process of its PID namespace before it could be waited for"
}

// nsTree is the tree as its namespace's init sees it: every other process
// of the namespace.
type nsTree struct{}

func (nsTree) attr() *syscall.SysProcAttr { return commandAttr() }
func (nsTree) started(int) int            { return 0 }

// signal sends sig to every process of the namespace but the supervisor
// (kill(2) with pid -1, from a namespace's init: newTree checked it is).
func (nsTree) signal(sig syscall.Signal) {
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, sig)
	}
}

func (nsTree) empty() bool {
	return os.Getpid() != 1 || errors.Is(syscall.Kill(-1, 0), syscall.ESRCH)
}
