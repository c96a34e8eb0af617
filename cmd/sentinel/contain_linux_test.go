package main

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The process tree of the command run by lock, elect and queue lock never
// outlives the lock, whatever happens to sentinel and its supervisor:
// Ctrl-Z (SIGTSTP to the job's process group, as a shell sends it), a
// SIGKILL of the supervisor, a SIGKILL of both, sentinel alone frozen
// (SIGSTOP) until the next holder runs. The first holder's command
// starts a grandchild that appends a timestamp to a file every 50 ms; a
// second holder waits on the same lock and records when its command
// starts. Checked: the second holder's command starts only once no
// process of the first tree is alive, and the first tree wrote nothing
// after it started.

// holdKinds are the three commands that run CMD under a lock.
var holdKinds = []struct {
	name string
	args []string // the command up to its options
}{
	{"lock", []string{"lock", "job"}},
	{"elect", []string{"elect", "group"}},
	{"queue-lock", []string{"queue", "lock", "printer"}},
}

// The events of issue 26 and a frozen sentinel, for each command, in the
// containment this machine gives root by default (a PID namespace).
func TestTreeNeverOutlivesTheLock(t *testing.T) {
	requireNamespaces(t, nil)
	for _, k := range holdKinds {
		for _, ev := range []string{"ctrl-z", "kill-supervisor", "kill-both", "stop-sentinel"} {
			t.Run(k.name+"/"+ev, func(t *testing.T) {
				runTreeCase(t, treeCase{args: k.args, event: ev, wantMode: containPIDNS})
			})
		}
	}
}

// Every containment this machine can give, each through the real binary:
// the user-namespace path as an unprivileged user, the cgroup path (as
// root, where namespaces are refused, and delegated to an unprivileged
// user), the process group (named, and where auto falls back to it with a
// warning). A SIGKILL of both sentinel and its supervisor is left out
// where the containment does not guarantee it (cgroup, process group: the
// help's table says so).
func TestTreeContainments(t *testing.T) {
	nobody := unprivileged(t)
	deny := denyNamespaces(t)
	cases := []struct {
		name   string
		c      treeCase
		events []string
	}{
		{"user-namespace", treeCase{user: nobody, wantMode: containPIDNS}, []string{"ctrl-z", "kill-supervisor", "kill-both"}},
		{"cgroup", treeCase{contain: containCgroup, wantMode: containCgroup}, []string{"ctrl-z", "kill-supervisor", "kill-sentinel"}},
		{"cgroup-auto", treeCase{wrap: deny, wantMode: containCgroup}, []string{"ctrl-z", "kill-supervisor"}},
		{"cgroup-delegated", treeCase{user: nobody, contain: containCgroup, delegate: true, wantMode: containCgroup}, []string{"ctrl-z", "kill-supervisor"}},
		{"process-group", treeCase{contain: containGroup, wantMode: containGroup}, []string{"ctrl-z", "kill-supervisor", "kill-sentinel"}},
		{"process-group-auto", treeCase{user: nobody, wrap: deny, wantMode: containGroup, wantWarning: true}, []string{"ctrl-z", "kill-supervisor"}},
	}
	for _, c := range cases {
		for _, ev := range c.events {
			t.Run(c.name+"/"+ev, func(t *testing.T) {
				switch {
				case c.c.wantMode == containPIDNS:
					requireNamespaces(t, c.c.user)
				case c.c.wantMode == containCgroup && !c.c.delegate:
					requireCgroup(t)
				}
				tc := c.c
				tc.args, tc.event = holdKinds[0].args, ev
				runTreeCase(t, tc)
			})
		}
	}
}

// Ctrl-Z, then fg before the lease ran out: each command asks the
// database (a renewal, VerifyTerm, VerifyTurn) and resumes the tree,
// which goes on writing.
func TestCtrlZThenFgResumesWhileHeld(t *testing.T) {
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.migrate()
			dir := sharedTempDir(t)
			work := filepath.Join(dir, "work")
			first, out := startJob(t, nil, nil, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
				append(append([]string{"--schema", e.schema}, k.args...), "--ttl", "4s", "--", "sh", "-c", writerScript)...)
			waitUntil(t, 20*time.Second, "the first command's writes", func() bool { return fileHasLine(work) }, out)
			require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGTSTP))
			waitUntil(t, 10*time.Second, "sentinel stopped", func() bool { return procState(first.Process.Pid) == 'T' }, out)
			time.Sleep(300 * time.Millisecond)
			n := lineCount(work)
			time.Sleep(300 * time.Millisecond)
			require.Equal(t, n, lineCount(work), "the tree wrote while stopped")
			require.True(t, treeAlive(work))

			require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGCONT))
			waitUntil(t, 10*time.Second, "the tree writing again", func() bool { return lineCount(work) > n+2 }, out)
			require.Contains(t, out.String(), "is still held; resumed")
			require.NoError(t, first.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 128+int(syscall.SIGTERM), exitCodeOf(t, first), "output: %s", out)
			require.False(t, treeAlive(work))
		})
	}
}

// Ctrl-Z, and the lease goes to another holder while the job is stopped
// (an operator expires it): on fg the tree is killed, not resumed, and it
// wrote nothing after the second holder started.
func TestCtrlZThenFgAfterTakeoverKills(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	dir := sharedTempDir(t)
	work, second := filepath.Join(dir, "work"), filepath.Join(dir, "second")
	env := []string{"DATABASE_URL=" + dbURL, "WORK=" + work}
	first, out := startJob(t, nil, nil, env, "--schema", e.schema, "lock", "job", "--ttl", "6s", "--", "sh", "-c", writerScript)
	waitUntil(t, 20*time.Second, "the first command's writes", func() bool { return fileHasLine(work) }, out)
	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGTSTP))
	waitUntil(t, 10*time.Second, "sentinel stopped", func() bool { return procState(first.Process.Pid) == 'T' }, out)

	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "leases"}.Sanitize()+
		" SET expires_at = pg_catalog.now() WHERE key = 'job'")
	require.NoError(t, err)
	next, nextOut := startBin(t, []string{"DATABASE_URL=" + dbURL, "SECOND=" + second},
		"--schema", e.schema, "lock", "job", "--ttl", "6s", "--", "sh", "-c", secondScript+"; sleep 1")
	waitUntil(t, 20*time.Second, "the second holder's command", func() bool { return exists(second) }, nextOut)

	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGCONT))
	code := exitCodeOf(t, first)
	require.Equal(t, 128+int(syscall.SIGKILL), code, "output: %s", out)
	require.Contains(t, out.String(), "killed sh and everything it started")
	require.False(t, treeAlive(work))
	secondAt := mustNanos(t, readFile(t, second))
	require.Less(t, lastWrite(t, work), secondAt, "the first tree wrote after the second holder started")
	require.Equal(t, 0, exitCodeOf(t, next), "second: %s", nextOut)
}

// A containment the system refuses, named with --contain, is an error
// before CMD runs; an unknown one is a usage error before the lock is
// taken.
func TestContainRefused(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	r := e.run("lock", "job", "--contain", "jail", "--", "true")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "pid-namespace, cgroup, process-group")

	nobody := unprivileged(t)
	dir := sharedTempDir(t)
	ran := filepath.Join(dir, "ran")
	cmd, out := startJob(t, nobody, nil, []string{"DATABASE_URL=" + dbURL, "RAN=" + ran},
		"--schema", e.schema, "lock", "job", "--contain", "cgroup", "--", "sh", "-c", `touch "$RAN"`)
	require.Equal(t, 127, exitCodeOf(t, cmd), "output: %s", out)
	require.Contains(t, out.String(), "--contain cgroup: refused on this system")
	require.False(t, exists(ran))
}

// writerScript starts a grandchild that appends a timestamp to $WORK
// every 50 ms, and waits.
const writerScript = `sh -c 'while :; do date +%s%N >> "$WORK"; sleep 0.05; done' & echo "$SENTINEL_CONTAINMENT" > "$WORK.mode"; wait`

// secondScript records when the second holder's command started.
const secondScript = `date +%s%N > "$SECOND.tmp" && mv "$SECOND.tmp" "$SECOND"`

type treeCase struct {
	args        []string // the command up to its options
	event       string   // ctrl-z, kill-supervisor, kill-both, kill-sentinel, stop-sentinel
	contain     string   // --contain; "" for the default (auto)
	user        *user.User
	wrap        []string // a command line sentinel runs under
	delegate    bool     // start the first holder in a cgroup delegated to user
	wantMode    string   // SENTINEL_CONTAINMENT the command must see
	wantWarning bool     // auto falls back to the process group: a warning
}

func runTreeCase(t *testing.T, c treeCase) {
	e := newEnv(t)
	e.migrate()
	dir := sharedTempDir(t)
	work, second := filepath.Join(dir, "work"), filepath.Join(dir, "second")
	env := []string{"DATABASE_URL=" + dbURL, "WORK=" + work}
	const ttl = 2 * time.Second
	args := append(append([]string{"--schema", e.schema}, c.args...), "--ttl", ttl.String())
	if c.contain != "" {
		args = append(args, "--contain", c.contain)
	}
	var cgroupDir string
	if c.delegate {
		cgroupDir = delegatedCgroup(t, c.user)
	}
	script := writerScript
	if c.event == "stop-sentinel" {
		// Deaf to the SIGTERM that late renewals send: the tree lives to
		// the deadline, and the supervisor reports the deadline's SIGKILL.
		script = `trap "" TERM; ` + writerScript
	}
	first, out := startJob(t, c.user, &jobSetup{wrap: c.wrap, cgroup: cgroupDir}, env, append(args, "--", "sh", "-c", script)...)
	waitUntil(t, 20*time.Second, "the first command's writes", func() bool { return fileHasLine(work) }, out)
	sup := supervisorOf(t, first.Process.Pid, out)

	// The second holder has no WORK: treeAlive tells the trees apart by it.
	next, nextOut := startBin(t, []string{"DATABASE_URL=" + dbURL, "SECOND=" + second}, append(append([]string{"--schema", e.schema}, c.args...),
		"--ttl", ttl.String(), "--", "sh", "-c", secondScript)...)
	time.Sleep(500 * time.Millisecond) // let it queue up behind the first
	require.False(t, exists(second), "the second holder ran while the first held: %s", nextOut)

	start := time.Now()
	switch c.event {
	case "ctrl-z":
		require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGTSTP))
	case "kill-supervisor":
		require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	case "kill-sentinel":
		require.NoError(t, first.Process.Kill())
	case "stop-sentinel":
		// sentinel frozen (SIGSTOP to it alone, as a debugger or a paused
		// VM would): the supervisor kills the tree at the local deadline,
		// and sentinel, continued once the next holder runs, finds the
		// tree's end and the deadline's news waiting together.
		require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	case "kill-both":
		// killall -9 sentinel, in the worst order: the supervisor cannot
		// act on sentinel's death before its own (it is stopped first).
		require.NoError(t, syscall.Kill(sup, syscall.SIGSTOP))
		require.NoError(t, first.Process.Kill())
		_ = syscall.Kill(sup, syscall.SIGKILL) // dead already in a PID namespace: its parent-death signal is SIGKILL
	}
	lastAlive := waitTreeGone(t, work, second, start.Add(ttl+10*time.Second), out)
	waitUntil(t, 30*time.Second, "the second holder's command", func() bool { return exists(second) }, nextOut)
	secondAt := mustNanos(t, readFile(t, second))
	last := lastWrite(t, work)
	t.Logf("%s: the first tree was last seen alive %v after the trigger, its last write at %v from it; the second holder started %v after it",
		c.event, lastAlive.Sub(start).Round(time.Millisecond), time.Duration(last-start.UnixNano()).Round(time.Millisecond),
		time.Duration(secondAt-start.UnixNano()).Round(time.Millisecond))
	require.Less(t, last, secondAt, "the first tree wrote after the second holder started")
	require.Less(t, lastAlive.UnixNano(), secondAt, "the first tree was seen alive after the second holder started")
	if c.event == "ctrl-z" {
		// Stopped at once: no write long after the keystroke.
		require.Less(t, last, start.Add(time.Second).UnixNano(), "the stopped tree kept writing")
		require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGCONT)) // fg
	}

	if c.event == "stop-sentinel" {
		require.NoError(t, first.Process.Signal(syscall.SIGCONT))
	}

	code := exitCodeOf(t, first)
	switch c.event {
	case "ctrl-z", "stop-sentinel":
		require.Equal(t, 128+int(syscall.SIGKILL), code, "output: %s", out)
		require.Contains(t, out.String(), "lost while sh ran")
	case "kill-supervisor":
		require.Equal(t, 128+int(syscall.SIGKILL), code, "output: %s", out)
		require.Contains(t, out.String(), "the supervisor of sh was killed")
	default:
		if c.wrap == nil {
			require.Equal(t, -1, code)
		}
	}
	require.Equal(t, 0, exitCodeOf(t, next), "second: %s", nextOut)

	// Last, so that the binary of an older commit fails on what it does,
	// not on what it says.
	require.Equal(t, c.wantMode, strings.TrimSpace(readFile(t, work+".mode")), "output: %s", out)
	if c.wantWarning {
		require.Contains(t, out.String(), "WARNING: sh runs contained by its process group only")
	} else {
		require.NotContains(t, out.String(), "WARNING")
	}
}

// waitTreeGone polls until no process of the tree writing to work is
// alive, and returns when the last look that still found one began (a
// look reads all of /proc and takes a while: the tree was alive at some
// time after that, and died before the next look ended). It fails if the
// second holder's command (the file second) started before, or the tree
// lives past giveUp. The second's file is looked at before the tree: seen
// both, the second ran while the first's tree was alive.
func waitTreeGone(t *testing.T, work, second string, giveUp time.Time, out *syncBuffer) (lastAlive time.Time) {
	t.Helper()
	for {
		secondRan := exists(second)
		look := time.Now()
		if !treeAlive(work) {
			return lastAlive
		}
		lastAlive = look
		require.False(t, secondRan, "the second holder's command started while the first's tree was alive; first: %s", out)
		require.True(t, time.Now().Before(giveUp), "the first tree survives; first: %s", out)
		time.Sleep(2 * time.Millisecond)
	}
}

// jobSetup is how startJob starts sentinel besides its user.
type jobSetup struct {
	wrap   []string // run under this command line
	cgroup string   // start in this cgroup
}

// startJob starts the binary as a shell starts a job: in a process group
// of its own (Ctrl-Z reaches that group), as u when not nil.
func startJob(t *testing.T, u *user.User, s *jobSetup, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	path, argv := bin, args
	if u != nil {
		path = publicBin(t)
	}
	if s != nil && len(s.wrap) > 0 {
		path, argv = s.wrap[0], append(append(append([]string{}, s.wrap[1:]...), path), args...)
	}
	cmd := exec.Command(path, argv...)
	cmd.Env = append(cleanEnv(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second // a tree that outlived it may hold its output open
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		cmd.Dir = "/"
		cmd.Env = append(cmd.Env, "HOME=/", "USER="+u.Username)
	}
	if s != nil && s.cgroup != "" {
		fd, err := os.Open(s.cgroup)
		require.NoError(t, err)
		defer func() { _ = fd.Close() }()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Wait()
	})
	return cmd, out
}

// unprivileged is the user the tests run sentinel as to take the paths of
// a user without privileges.
func unprivileged(t *testing.T) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the tests switch to an unprivileged user, which needs root")
	}
	for _, name := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(name); err == nil {
			return u
		}
	}
	t.Skip("no unprivileged user (postgres, nobody) to run sentinel as")
	return nil
}

// requireNamespaces skips unless u (nil: this process's user) may create
// PID namespaces (as root), or user and PID namespaces together.
func requireNamespaces(t *testing.T, u *user.User) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) to probe for namespaces")
	}
	args := []string{"-p", "-f", "-m", "true"}
	if u != nil {
		args = append([]string{"-U"}, args...)
	}
	probe := exec.Command(unshare, args...)
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		probe.Dir = "/"
	}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("this system refuses PID namespaces to this user (%v: %s): the path is not exercisable here", err, out)
	}
}

// requireCgroup skips unless this process may make a cgroup box.
func requireCgroup(t *testing.T) {
	t.Helper()
	b, err := newCgroupBox()
	if err != nil {
		t.Skipf("no delegated cgroup v2 with cgroup.kill here (%v): the cgroup path is not exercisable", err)
	}
	b.close()
}

// denyNamespaces is a command line under which creating a PID or user
// namespace fails (ENOSPC), as in a container that refuses them: a user
// namespace of its own whose limits are zero (the limits are per user
// namespace, nothing outside it changes).
func denyNamespaces(t *testing.T) []string {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1): cannot run sentinel where namespaces are refused")
	}
	probe := exec.Command(unshare, "-Ur", "sh", "-c", denyScript+` exec unshare -p -f true`)
	if err := probe.Run(); err == nil {
		t.Skip("cannot make a user namespace refuse nested namespaces here")
	}
	if out, err := exec.Command(unshare, "-Ur", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -Ur refused (%v: %s): cannot run sentinel where namespaces are refused", err, out)
	}
	return []string{unshare, "-Ur", "sh", "-c", denyScript + ` exec "$@"`, "sh"}
}

const denyScript = `echo 0 > /proc/sys/user/max_user_namespaces && echo 0 > /proc/sys/user/max_pid_namespaces &&`

// delegatedCgroup makes a cgroup v2 delegated to u (as systemd's Delegate=
// does), removed at the end.
func delegatedCgroup(t *testing.T, u *user.User) string {
	t.Helper()
	parent, err := ownCgroup()
	if err != nil {
		t.Skipf("no cgroup v2 to delegate: %v", err)
	}
	dir := filepath.Join(parent, "sentinel-test-"+strconv.Itoa(os.Getpid())+"-"+filepath.Base(t.TempDir()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v2 to delegate: %v", err)
	}
	t.Cleanup(func() {
		for i := 0; i < 100; i++ {
			if entries, _ := os.ReadDir(dir); true {
				for _, e := range entries {
					if e.IsDir() {
						_ = os.Remove(filepath.Join(dir, e.Name(), "cmd"))
						_ = os.Remove(filepath.Join(dir, e.Name()))
					}
				}
			}
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		require.NoError(t, os.Chown(filepath.Join(dir, f), uid, gid))
	}
	return dir
}

// publicBin is the binary, made runnable by every user (its directory,
// which TestMain removes, is opened to them).
func publicBin(t *testing.T) string {
	t.Helper()
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	return bin
}

// sharedTempDir is a temporary directory every user may write in.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sentinel-tree")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// supervisorOf waits for sentinel's supervising child and returns its PID.
func supervisorOf(t *testing.T, pid int, out *syncBuffer) int {
	t.Helper()
	var sup int
	waitUntil(t, 10*time.Second, "the supervisor", func() bool {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				cl, _ := os.ReadFile("/proc/" + c + "/cmdline")
				if bytes.Contains(cl, []byte(superviseArg)) {
					sup, _ = strconv.Atoi(c)
					return true
				}
			}
		}
		return false
	}, out)
	return sup
}

// treeAlive reports whether a process of the command's tree writing to
// work is alive: one with WORK=work in its environment that is neither
// sentinel nor its supervisor (which have it too) nor a zombie.
func treeAlive(work string) bool {
	marker := []byte("WORK=" + work + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		env, err := os.ReadFile(p + "/environ")
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		if exe, _ := os.Readlink(p + "/exe"); exe == bin {
			continue
		}
		if st := procState(atoi(filepath.Base(p))); st != 'Z' && st != 0 {
			return true
		}
	}
	return false
}

// procState is the state letter of process pid (R, S, T, Z, ...), 0 if
// it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func lineCount(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// lastWrite is the last timestamp the tree wrote.
func lastWrite(t *testing.T, work string) int64 {
	t.Helper()
	lines := strings.Fields(readFile(t, work))
	require.NotEmpty(t, lines)
	return mustNanos(t, lines[len(lines)-1])
}
