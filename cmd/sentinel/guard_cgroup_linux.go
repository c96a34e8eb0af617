package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A cgroup box is a cgroup v2 directory sentinel-PID-N under sentinel's
// own cgroup: the supervisor is born in it (CLONE_INTO_CGROUP), the
// command in its child "cmd". Writing "1" to cgroup.kill SIGKILLs every
// process of a cgroup and its descendants at once (Linux 5.14), so a fork
// cannot race it; cgroup.events says "populated 0" once none is alive.

// cgroupSeq numbers the boxes of one sentinel process.
var cgroupSeq atomic.Int64

// boxName matches the boxes sentinel makes (the PID is their maker's).
var boxName = regexp.MustCompile(`^sentinel-([0-9]+)-[0-9]+$`)

type cgroupBox struct {
	dir string
	fd  *os.File // the directory, for CLONE_INTO_CGROUP
}

// newCgroupBox makes a box under sentinel's own cgroup, or says why it
// cannot (no cgroup v2, not delegated to this user, a kernel without
// cgroup.kill).
func newCgroupBox() (box, error) {
	parent, err := ownCgroup()
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	sweepCgroupBoxes(parent)
	dir := filepath.Join(parent, fmt.Sprintf("sentinel-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2 not delegated to this user: %w", err)
	}
	b := &cgroupBox{dir: dir}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		b.close()
		return nil, fmt.Errorf("cgroup: no cgroup.kill in %s (Linux 5.14 or later has it)", dir)
	}
	if err := os.Mkdir(filepath.Join(dir, "cmd"), 0o755); err != nil {
		b.close()
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if b.fd, err = os.Open(dir); err != nil {
		b.close()
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return b, nil
}

func (b *cgroupBox) name() string { return containCgroup }
func (b *cgroupBox) arg() string  { return containCgroup + "=" + b.dir }
func (b *cgroupBox) attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, UseCgroupFD: true, CgroupFD: int(b.fd.Fd())}
}

// drain empties the box (the supervisor's remains and the command's
// cgroup) with cgroup.kill and waits until nothing in it is alive.
func (b *cgroupBox) drain(_ int, slow func()) {
	start, noted := time.Now(), false
	for populated(b.dir) {
		_ = os.WriteFile(filepath.Join(b.dir, "cgroup.kill"), []byte("1"), 0)
		if !noted && time.Since(start) > 2*time.Second {
			slow()
			noted = true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (b *cgroupBox) afterDeath() string {
	return "sentinel killed what was left of its cgroup (cgroup.kill) and waited until it was empty"
}

// close removes the box (empty by now; a box left behind is removed by a
// later sentinel, see sweepCgroupBoxes).
func (b *cgroupBox) close() {
	if b.fd != nil {
		_ = b.fd.Close()
	}
	for i := 0; i < 50; i++ { // rmdir can lag the last exit briefly
		_ = os.Remove(filepath.Join(b.dir, "cmd"))
		if err := os.Remove(b.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sweepCgroupBoxes removes the empty boxes that sentinels which died
// (SIGKILL) left in parent: one whose maker is gone and in which nothing
// is alive. A box with processes in it is kept: its tree outlived both
// sentinel and supervisor, and an operator should see it.
func sweepCgroupBoxes(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := boxName.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if populated(dir) {
			continue
		}
		_ = os.Remove(filepath.Join(dir, "cmd"))
		_ = os.Remove(dir)
	}
}

// populated reads a cgroup's cgroup.events: whether a live process is in
// it or below (a cgroup that cannot be read counts as populated, except
// one that no longer exists).
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return !bytes.Contains(b, []byte("populated 0"))
}

// ownCgroup is the directory of this process's cgroup v2.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return "", errors.New("this process is in no cgroup v2 hierarchy")
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer func() { _ = mi.Close() }()
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		if r, ok := strings.CutPrefix(rel, root); ok && (root == "/" || r == "" || r[0] == '/') {
			return filepath.Join(mnt, r), nil
		}
	}
	return "", errors.New("no cgroup2 file system mounted that holds this process's cgroup")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// cgroupTree is the tree as the supervisor holds it in a cgroup box: the
// command's cgroup, dir/cmd.
type cgroupTree struct {
	dir  string
	fd   *os.File
	pgid int
}

func openCgroupTree(box string) (*cgroupTree, error) {
	dir := filepath.Join(box, "cmd")
	fd, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open the command's cgroup: %w", err)
	}
	syscall.CloseOnExec(int(fd.Fd()))
	return &cgroupTree{dir: dir, fd: fd}, nil
}

func (t *cgroupTree) attr() *syscall.SysProcAttr {
	a := commandAttr()
	a.UseCgroupFD, a.CgroupFD = true, int(t.fd.Fd())
	return a
}

func (t *cgroupTree) started(pid int) int { t.pgid = pid; return pid }

// signal: SIGKILL through cgroup.kill (no fork escapes it); any other
// signal to each process the cgroup lists, and to the process group.
func (t *cgroupTree) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = os.WriteFile(filepath.Join(t.dir, "cgroup.kill"), []byte("1"), 0)
		return
	}
	if t.pgid > 1 {
		_ = syscall.Kill(-t.pgid, sig)
	}
	b, err := os.ReadFile(filepath.Join(t.dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

func (t *cgroupTree) empty() bool { return !populated(t.dir) }
