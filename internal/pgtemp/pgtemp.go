// Package pgtemp runs a throwaway PostgreSQL cluster from locally installed
// server binaries (initdb and postgres). It is meant for tests, demos,
// benchmarks and fault-injection suites that need a real server they are
// allowed to stop, restart, pause or kill.
//
// Lifetime: always `defer c.Close()` right after a successful Start. Close
// stops the server immediately, kills every process left in its process
// group and deletes the temporary directory. As a safety net for crashed or
// killed test binaries, the postmaster is started as a direct child process
// with a parent-death signal (SIGKILL): when the process that called Start
// dies, the postmaster is killed by the kernel and its backends exit on their
// own. Only the temporary directory is then left behind (under
// os.TempDir(), named pgtemp-*), and the next Start on the host removes it
// (see sweepDirs).
//
// When running as root (PostgreSQL refuses to), initdb and postgres run as
// the "postgres" OS user through exec.Cmd's SysProcAttr.Credential, and the
// temporary directory is chowned to that user.
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DatabaseName is the database that Start creates and URL points at.
const DatabaseName = "sentinel"

// superuser is the bootstrap superuser created by initdb.
const superuser = "postgres"

// defaultStartTimeout bounds server start-up when ctx has no deadline.
const defaultStartTimeout = 60 * time.Second

// Options configure Start. The zero value is usable.
type Options struct {
	// BinDir holds initdb and postgres; empty means FindBinDir().
	BinDir string
	// Port to listen on at 127.0.0.1; 0 picks a free port.
	Port int
	// Settings are extra postgresql.conf settings (name -> value). Values
	// are written quoted, which PostgreSQL accepts for every setting type.
	// They are written after the defaults, so they override them.
	Settings map[string]string
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
// Its methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	baseDir string // temp dir, removed by Close
	dataDir string
	sockDir string // "" when unix sockets are disabled
	logPath string
	port    int
	cred    *syscall.Credential // nil when not running as root
	logf    func(string, ...any)

	mu     sync.Mutex
	proc   *serverProc // nil when stopped
	closed bool
}

// serverProc is one run of the postmaster.
type serverProc struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

func (p *serverProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// FindBinDir locates PostgreSQL server binaries. It looks, in order, for a
// directory on $PATH holding both initdb and pg_ctl, at `pg_config --bindir`,
// then at /usr/lib/postgresql/*/bin (highest version first). Symbolic links
// found on $PATH are resolved, so the returned directory also holds the
// postgres binary when it sits next to initdb.
func FindBinDir() (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		if !hasServerBins(dir) {
			continue
		}
		// Resolve symlinks such as /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb.
		if real, err := filepath.EvalSymlinks(filepath.Join(dir, "initdb")); err == nil {
			if rd := filepath.Dir(real); hasServerBins(rd) && isExecutable(filepath.Join(rd, "postgres")) {
				return rd, nil
			}
		}
		return dir, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" && hasServerBins(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		return versionLess(versionOf(dirs[j]), versionOf(dirs[i]))
	})
	for _, dir := range dirs {
		if hasServerBins(dir) {
			return dir, nil
		}
	}
	return "", errors.New("pgtemp: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found " +
		"on $PATH, via `pg_config --bindir`, or in /usr/lib/postgresql/*/bin; " +
		"install them (e.g. `apt-get install postgresql`) or put their directory on $PATH")
}

func hasServerBins(dir string) bool {
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl"))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// versionOf extracts the numeric parts of the version directory in
// /usr/lib/postgresql/<version>/bin, e.g. "9.6" -> [9 6].
func versionOf(binDir string) []int {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return v
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// Start creates a fresh cluster in a new temporary directory (initdb with
// trust authentication, superuser "postgres"), starts it listening on
// 127.0.0.1 only, creates the database "sentinel" and waits until it accepts
// connections. Defaults written to postgresql.conf: fsync=off,
// full_page_writes=off (synchronous_commit stays at its default, on),
// max_connections=200, unix socket inside the temporary directory.
//
// The caller must Close the cluster (defer c.Close()).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"initdb", "postgres"} {
		if !isExecutable(filepath.Join(binDir, b)) {
			return nil, fmt.Errorf("pgtemp: %s not found in %s", b, binDir)
		}
	}

	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}

	parent := tempParent(cred != nil)
	sweepDirs(parent, logf)
	baseDir, err := os.MkdirTemp(parent, "pgtemp-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	if err := writeOwner(baseDir); err != nil {
		_ = os.RemoveAll(baseDir)
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	c := &Cluster{
		binDir:  binDir,
		baseDir: baseDir,
		dataDir: filepath.Join(baseDir, "data"),
		sockDir: filepath.Join(baseDir, "sock"),
		logPath: filepath.Join(baseDir, "postgres.log"),
		cred:    cred,
		logf:    logf,
	}
	ok := false
	defer func() {
		if !ok {
			_ = c.Close()
		}
	}()

	if err := os.Mkdir(c.sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	// The unix socket path (dir + "/.s.PGSQL.NNNNN") must fit in sun_path.
	if len(c.sockDir)+len("/.s.PGSQL.65535") >= 100 {
		c.sockDir = ""
	}
	if cred != nil {
		for _, p := range []string{baseDir, filepath.Join(baseDir, "sock")} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgtemp: chown %s: %w", p, err)
			}
		}
	}

	logf("pgtemp: initdb %s (binaries in %s)", c.dataDir, binDir)
	initdb := c.command(ctx, "initdb",
		"-D", c.dataDir, "-U", superuser, "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtemp: initdb failed: %w\n%s", err, tail(string(out), 40))
	}

	// Try a few free ports: another process may grab the one we picked
	// between choosing it and the server binding it.
	attempts := 1
	if opts.Port == 0 {
		attempts = 4
	}
	for i := 0; ; i++ {
		c.port = opts.Port
		if c.port == 0 {
			if c.port, err = freePort(); err != nil {
				return nil, fmt.Errorf("pgtemp: picking a free port: %w", err)
			}
		}
		if err := c.writeConfig(opts.Settings); err != nil {
			return nil, err
		}
		err = c.Start(ctx)
		if err == nil {
			break
		}
		if i+1 >= attempts || !strings.Contains(c.logTail(20), "could not bind") || ctx.Err() != nil {
			return nil, err
		}
		logf("pgtemp: port %d taken, retrying with another one", c.port)
	}

	if err := c.createDatabase(ctx); err != nil {
		return nil, err
	}
	logf("pgtemp: cluster ready at %s", c.URL())
	ok = true
	return c, nil
}

// serverCredential returns the credential to run PostgreSQL with, or nil
// when the current user is not root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(superuser)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: running as root, and PostgreSQL refuses to run as root; "+
			"no %q OS user to run it as (%v): run the tests as a non-root user, "+
			"or create that user (e.g. `useradd --system postgres`, or `apt-get install postgresql`)", superuser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtemp: bad uid/gid %q/%q for user %q", u.Uid, u.Gid, superuser)
	}
	if uid == 0 {
		return nil, fmt.Errorf("pgtemp: OS user %q has uid 0; PostgreSQL cannot run as root", superuser)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempParent returns the directory to create the temp dir in. When the
// server runs as another user, that user must be able to reach it, so a
// TMPDIR that others cannot traverse (e.g. under /root) is replaced by /tmp.
// ownerFile, in a cluster's temporary directory, names the process that
// started it: "<hostname> <pid>".
const ownerFile = "owner"

func writeOwner(baseDir string) error {
	host, _ := os.Hostname()
	return os.WriteFile(filepath.Join(baseDir, ownerFile), fmt.Appendf(nil, "%s %d\n", host, os.Getpid()), 0o644)
}

// sweepDirs removes the pgtemp-* directories under parent that a killed
// process left behind (its server died with it, but nothing deleted the
// directory: about 40 MB each). A directory goes only when its owner file
// names a process of this host that is gone and its postmaster is gone
// too; a directory without an owner file (written by an older version, or
// being created) is left alone.
func sweepDirs(parent string, logf func(string, ...any)) {
	host, _ := os.Hostname()
	dirs, _ := filepath.Glob(filepath.Join(parent, "pgtemp-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		var h string
		var pid int
		if n, _ := fmt.Sscanf(string(b), "%s %d", &h, &pid); n != 2 || h != host || pid <= 0 || pid == os.Getpid() || !processGone(pid) {
			continue
		}
		if pm, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			if first, _, _ := strings.Cut(string(pm), "\n"); first != "" {
				if p, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && p > 0 && !processGone(p) {
					continue
				}
			}
		}
		if err := os.RemoveAll(d); err != nil {
			logf("pgtemp: removing %s, left by process %d that is gone: %v", d, pid, err)
			continue
		}
		logf("pgtemp: removed %s, left by process %d that is gone", d, pid)
	}
}

// processGone reports whether pid does not exist or is a zombie.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.ESRCH)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	st := string(stat)
	i := strings.LastIndexByte(st, ')')
	return i >= 0 && i+2 < len(st) && st[i+2] == 'Z'
}

func tempParent(otherUser bool) string {
	dir := os.TempDir()
	if !otherUser {
		return dir
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if p == filepath.Dir(p) {
			return dir
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeConfig writes the settings into pgtemp.conf, included from
// postgresql.conf, so it can be rewritten (new port) without duplicates.
func (c *Cluster) writeConfig(extra map[string]string) error {
	settings := [][2]string{
		{"listen_addresses", "127.0.0.1"},
		{"port", strconv.Itoa(c.port)},
		{"unix_socket_directories", c.sockDir},
		{"max_connections", "200"},
		{"fsync", "off"},
		{"full_page_writes", "off"},
		{"logging_collector", "off"},
		{"log_line_prefix", "%m [%p] "},
		{"shared_buffers", "32MB"},
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		settings = append(settings, [2]string{k, extra[k]})
	}
	var b strings.Builder
	b.WriteString("# written by pgtemp\n")
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = '%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", "''"))
	}
	inc := filepath.Join(c.dataDir, "pgtemp.conf")
	if err := os.WriteFile(inc, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgtemp: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(inc, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
	}
	conf := filepath.Join(c.dataDir, "postgresql.conf")
	data, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgtemp: %w", err)
	}
	const include = "\ninclude 'pgtemp.conf'\n"
	if !strings.Contains(string(data), include) {
		f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
		_, err = f.WriteString(include)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
	}
	return nil
}

// command builds an exec.Cmd for a PostgreSQL binary, run as the server
// user when we are root, with PG* variables removed from the environment.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.baseDir
	env := []string{"LC_ALL=C", "LANG=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// URL returns postgres://postgres@127.0.0.1:PORT/sentinel?sslmode=disable.
func (c *Cluster) URL() string {
	return c.DatabaseURL(DatabaseName)
}

// DatabaseURL is like URL but for another database in the cluster.
func (c *Cluster) DatabaseURL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, db)
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// BinDir returns the directory of the PostgreSQL binaries in use.
func (c *Cluster) BinDir() string { return c.binDir }

// LogPath returns the server log file (appended to across restarts).
func (c *Cluster) LogPath() string { return c.logPath }

// LogTail returns up to the last n lines of the server log.
func (c *Cluster) LogTail(n int) string { return c.logTail(n) }

func (c *Cluster) logTail(n int) string {
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	return tail(string(data), n)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) errorf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if t := c.logTail(30); t != "" {
		msg += "\n--- tail of " + c.logPath + " ---\n" + t
	}
	return errors.New("pgtemp: " + msg)
}

// Start starts the server again after Stop (or after it was killed), with
// the same port and data directory, and waits until it accepts connections.
// It is a no-op if the server is running.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgtemp: cluster is closed")
	}
	if c.proc != nil && !c.proc.exited() {
		return nil
	}
	c.proc = nil
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}

	// After a SIGKILL of the postmaster, its backends may take a moment to
	// exit and release shared memory; the new postmaster then refuses to
	// start ("pre-existing shared memory block is still in use"). Retry.
	for {
		proc, err := c.spawn()
		if err != nil {
			return err
		}
		err = c.waitReady(ctx, proc)
		if err == nil {
			c.proc = proc
			c.logf("pgtemp: server running (pid %d, port %d)", proc.cmd.Process.Pid, c.port)
			return nil
		}
		killAndReap(proc)
		lt := c.logTail(10)
		retryable := strings.Contains(lt, "pre-existing shared memory block") ||
			strings.Contains(lt, "lock file") && strings.Contains(lt, "already exists")
		if !retryable || ctx.Err() != nil {
			return err
		}
		c.logf("pgtemp: previous server still shutting down; retrying start")
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// spawn starts the postmaster as a child process.
func (c *Cluster) spawn() (*serverProc, error) {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: %w", err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	// Not tied to a context: the server outlives the call that started it.
	cmd := c.command(context.Background(), "postgres", "-D", c.dataDir)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Own process group: terminal signals aimed at the test binary do not
	// reach the server, and Close can kill all of its processes at once.
	cmd.SysProcAttr.Setpgid = true
	// Kill the postmaster if we die without calling Close.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := startOnLockedThread(cmd); err != nil {
		return nil, fmt.Errorf("pgtemp: starting postgres: %w", err)
	}
	p := &serverProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// The parent-death signal fires when the *thread* that forked the child
// exits, and Go may end a thread whose goroutine was locked to it. So all
// servers are forked from one goroutine that locks its thread and never
// returns.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startOnLockedThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}

// waitReady polls until the server accepts a connection, the process exits
// or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, p *serverProc) error {
	for {
		if p.exited() {
			return c.errorf("postgres exited during start-up: %v", p.waitErr)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(pctx, c.DatabaseURL("postgres"))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return c.errorf("postgres did not accept connections in time (last error: %v)", err)
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func (c *Cluster) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DatabaseURL("postgres"))
	if err != nil {
		return c.errorf("connecting to create database %q: %v", DatabaseName, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+DatabaseName); err != nil {
		return c.errorf("creating database %q: %v", DatabaseName, err)
	}
	return nil
}

// Stop shuts the server down like `pg_ctl stop -m MODE` and waits for the
// postmaster to exit. MODE is "smart" (wait for clients to disconnect),
// "fast" (default when empty: abort transactions, disconnect clients,
// checkpoint) or "immediate" (abort everything; crash recovery happens on
// the next start). Stopping a stopped server is a no-op. If ctx ends first,
// Stop returns ctx's error and the server may still be running.
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(ctx, mode)
}

func (c *Cluster) stopLocked(ctx context.Context, mode string) error {
	var sig syscall.Signal
	switch mode {
	case "smart", "s":
		sig = syscall.SIGTERM
	case "fast", "f", "":
		sig = syscall.SIGINT
	case "immediate", "i":
		sig = syscall.SIGQUIT
	default:
		return fmt.Errorf("pgtemp: unknown stop mode %q (want smart, fast or immediate)", mode)
	}
	p := c.proc
	if p == nil || p.exited() {
		c.proc = nil
		return nil
	}
	pid := p.cmd.Process.Pid
	// A paused (SIGSTOPped) server must be resumed to handle the signal.
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgtemp: signalling postmaster %d: %w", pid, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("pgtemp: waiting for postmaster %d to stop (mode %s): %w", pid, mode, ctx.Err())
	}
	c.proc = nil
	c.logf("pgtemp: server stopped (mode %s)", mode)
	return nil
}

// Restart stops the server with the given mode and starts it again.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if err := c.Stop(ctx, mode); err != nil {
		return err
	}
	return c.Start(ctx)
}

// PID returns the postmaster's process id, for tests that send it signals
// (SIGSTOP, SIGKILL...). It fails if the server is not running.
func (c *Cluster) PID() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return 0, errors.New("pgtemp: server is not running")
	}
	return c.proc.cmd.Process.Pid, nil
}

// Close stops the server immediately, kills any process left in its process
// group (backends included) and removes the temporary directory. It is
// idempotent and safe to call on a partially started cluster.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if p := c.proc; p != nil {
		pid := p.cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		killAndReap(p)
		c.proc = nil
	}
	if c.baseDir == "" {
		return nil
	}
	if err := os.RemoveAll(c.baseDir); err != nil {
		return fmt.Errorf("pgtemp: removing %s: %w", c.baseDir, err)
	}
	return nil
}

// killAndReap SIGKILLs the postmaster's whole process group and waits for
// the postmaster to be reaped.
func killAndReap(p *serverProc) {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL) // process group (Setpgid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}
