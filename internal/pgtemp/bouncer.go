package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBouncer is returned by StartBouncer when no pgbouncer binary is
// installed.
var ErrNoBouncer = errors.New("pgtemp: pgbouncer not installed (apt-get install pgbouncer)")

// Bouncer is a running pgbouncer in transaction pooling mode in front of a
// cluster's database DatabaseName, run as the server's OS user when
// running as root (pgbouncer refuses root).
type Bouncer struct {
	Port         int
	Version      string // the first line of pgbouncer --version
	Major, Minor int
	// SupportsPrepared: >= 1.21, where max_prepared_statements lets
	// pgx's cached prepared statements work in transaction pooling.
	SupportsPrepared bool

	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
	dir    string
}

// BouncerBinary returns the path of pgbouncer, or "".
func BouncerBinary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// StartBouncer starts pgbouncer in transaction pooling mode in front of the
// server on 127.0.0.1:pgPort (user postgres, trust), with poolSize server
// connections, and waits until it answers.
func StartBouncer(ctx context.Context, pgPort, poolSize int) (*Bouncer, error) {
	bin := BouncerBinary()
	if bin == "" {
		return nil, ErrNoBouncer
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgtemp: pgbouncer --version: %v: %s", err, out)
	}
	b := &Bouncer{Version: strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0], logs: &lockedBuffer{}, exited: make(chan struct{})}
	m := regexp.MustCompile(`(\d+)\.(\d+)`).FindStringSubmatch(b.Version)
	if m == nil {
		return nil, fmt.Errorf("pgtemp: cannot parse pgbouncer version %q", b.Version)
	}
	b.Major, _ = strconv.Atoi(m[1])
	b.Minor, _ = strconv.Atoi(m[2])
	b.SupportsPrepared = b.Major > 1 || b.Major == 1 && b.Minor >= 21
	if b.Port, err = freePort(); err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if b.dir, err = os.MkdirTemp(tempParent(cred != nil), "pgbouncer-"); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(b.dir)
			return nil, err
		}
	}
	extra := ""
	if b.SupportsPrepared {
		extra = "max_prepared_statements = 200\n"
	}
	ini := fmt.Sprintf(`[databases]
%s = host=127.0.0.1 port=%d dbname=%s user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
server_reset_query =
admin_users = postgres
%s`, DatabaseName, pgPort, DatabaseName, b.Port, filepath.Join(b.dir, "userlist.txt"), poolSize, extra)
	for name, content := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"} {
		p := filepath.Join(b.dir, name)
		err := os.WriteFile(p, []byte(content), 0o644)
		if err == nil && cred != nil {
			err = os.Chown(p, int(cred.Uid), int(cred.Gid))
		}
		if err != nil {
			_ = os.RemoveAll(b.dir)
			return nil, err
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	b.cmd.Dir = b.dir
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		_ = os.RemoveAll(b.dir)
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		cfg, _ := pgx.ParseConfig(b.URL())
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(pctx, cfg)
		if err == nil {
			err = conn.Ping(pctx)
			_ = conn.Close(pctx)
		}
		cancel()
		if err == nil {
			return b, nil
		}
		select {
		case <-b.exited:
			_ = b.Close()
			return nil, fmt.Errorf("pgtemp: pgbouncer exited: %s", tail(b.logs.String(), 20))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = b.Close()
			return nil, fmt.Errorf("pgtemp: pgbouncer not ready: %v\n%s", err, tail(b.logs.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the bouncer's database URL.
func (b *Bouncer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.Port, DatabaseName)
}

// LogTail returns the last n lines of pgbouncer's output.
func (b *Bouncer) LogTail(n int) string { return tail(b.logs.String(), n) }

// Close stops pgbouncer (SIGINT, then SIGKILL after 5 s) and removes its
// directory.
func (b *Bouncer) Close() error {
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	return os.RemoveAll(b.dir)
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
