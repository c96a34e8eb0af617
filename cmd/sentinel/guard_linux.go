package main

import "syscall"

// Linux guarantees the parent's death reaches the process tree: the
// supervisor gets SIGTERM when sentinel dies (even by SIGKILL or the OOM
// killer) and kills the command's group; the command gets SIGKILL if the
// supervisor itself dies.

func supervisorAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes the command's orphans the supervisor's children,
// so it can reap them and tell when the group is empty.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}
