package pgtemp

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestFindBinDir(t *testing.T) {
	dir, err := FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	for _, b := range []string{"initdb", "pg_ctl"} {
		if !isExecutable(filepath.Join(dir, b)) {
			t.Errorf("%s missing in %s", b, dir)
		}
	}
}

func TestFindBinDirNone(t *testing.T) {
	if _, err := os.Stat("/usr/lib/postgresql"); err == nil {
		t.Skip("/usr/lib/postgresql exists; cannot test the not-found error")
	}
	t.Setenv("PATH", t.TempDir())
	_, err := FindBinDir()
	if err == nil || !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Fatalf("want a not-found error with install hint, got %v", err)
	}
}

func TestVersionOrder(t *testing.T) {
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/10/bin"}
	if !versionLess(versionOf(dirs[0]), versionOf(dirs[2])) || !versionLess(versionOf(dirs[2]), versionOf(dirs[1])) {
		t.Fatalf("bad version order: %v %v %v", versionOf(dirs[0]), versionOf(dirs[1]), versionOf(dirs[2]))
	}
}

func startCluster(t *testing.T) *Cluster {
	t.Helper()
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{
		Settings: map[string]string{"work_mem": "7MB", "application_name": "it's pgtemp"},
		Logf:     t.Logf,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, ctx context.Context, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("connect %s: %v\n%s", c.URL(), err, c.LogTail(20))
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func countRows(t *testing.T, ctx context.Context, c *Cluster) int {
	t.Helper()
	conn := connect(t, ctx, c)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func insertRow(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	conn := connect(t, ctx, c)
	if _, err := conn.Exec(ctx, "INSERT INTO items DEFAULT VALUES"); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

// TestCluster uses one cluster for all lifecycle checks to keep the
// package fast.
func TestCluster(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if want := "postgres://postgres@127.0.0.1:"; !strings.HasPrefix(c.URL(), want) ||
		!strings.HasSuffix(c.URL(), "/sentinel?sslmode=disable") {
		t.Fatalf("URL = %q", c.URL())
	}
	if c.Port() <= 0 || !strings.Contains(c.URL(), ":"+strconv.Itoa(c.Port())+"/") {
		t.Fatalf("Port = %d, URL = %q", c.Port(), c.URL())
	}
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); err != nil {
		t.Fatalf("DataDir: %v", err)
	}

	conn := connect(t, ctx, c)
	var db, workMem, appName, fsync, syncCommit, listen, maxConns string
	err := conn.QueryRow(ctx, `SELECT current_database(), current_setting('work_mem'),
		current_setting('application_name'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('listen_addresses'),
		current_setting('max_connections')`).
		Scan(&db, &workMem, &appName, &fsync, &syncCommit, &listen, &maxConns)
	if err != nil {
		t.Fatal(err)
	}
	if db != "sentinel" || workMem != "7MB" || fsync != "off" || syncCommit != "on" ||
		listen != "127.0.0.1" || maxConns != "200" {
		t.Fatalf("settings: db=%s work_mem=%s fsync=%s synchronous_commit=%s listen=%s max_connections=%s",
			db, workMem, fsync, syncCommit, listen, maxConns)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE items (id bigserial PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	insertRow(t, ctx, c)

	t.Run("StopStartFast", func(t *testing.T) {
		pid, err := c.PID()
		if err != nil || pid <= 0 {
			t.Fatalf("PID = %d, %v", pid, err)
		}
		if err := c.Stop(ctx, "fast"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PID(); err == nil {
			t.Fatal("PID succeeded on a stopped server")
		}
		if err := c.Stop(ctx, "fast"); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		if conn, err := pgx.Connect(ctx, c.URL()); err == nil {
			conn.Close(ctx)
			t.Fatal("connected to a stopped server")
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, ctx, c); n != 1 {
			t.Fatalf("rows after restart = %d, want 1", n)
		}
		insertRow(t, ctx, c)
	})

	t.Run("RestartImmediate", func(t *testing.T) {
		// A connection open across the restart is broken afterwards.
		held := connect(t, ctx, c)
		old, _ := c.PID()
		if err := c.Restart(ctx, "immediate"); err != nil {
			t.Fatal(err)
		}
		if pid, _ := c.PID(); pid == old {
			t.Fatal("PID unchanged after restart")
		}
		if err := held.Ping(ctx); err == nil {
			t.Fatal("connection survived an immediate restart")
		}
		if n := countRows(t, ctx, c); n != 2 {
			t.Fatalf("rows after immediate restart = %d, want 2", n)
		}
		insertRow(t, ctx, c)
	})

	t.Run("KillAndStart", func(t *testing.T) {
		pid, err := c.PID()
		if err != nil {
			t.Fatal(err)
		}
		held := connect(t, ctx, c) // a live backend while the postmaster dies
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := c.PID(); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("PID still reports a running server after SIGKILL")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = held
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, ctx, c); n != 3 {
			t.Fatalf("rows after kill + start = %d, want 3", n)
		}
	})

	t.Run("PauseResume", func(t *testing.T) {
		pid, err := c.PID()
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
		conn, err := pgx.Connect(short, c.URL())
		cancelShort()
		if err == nil {
			conn.Close(ctx)
			t.Fatal("connected to a paused postmaster")
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, ctx, c); n != 3 {
			t.Fatalf("rows after pause = %d, want 3", n)
		}
	})

	t.Run("StopPausedSmart", func(t *testing.T) {
		pid, _ := c.PID()
		_ = syscall.Kill(pid, syscall.SIGSTOP) // Stop must resume it
		if err := c.Stop(ctx, "smart"); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BadMode", func(t *testing.T) {
		if err := c.Stop(ctx, "violent"); err == nil {
			t.Fatal("Stop accepted an unknown mode")
		}
	})

	t.Run("Close", func(t *testing.T) {
		base := c.baseDir
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := os.Stat(base); !os.IsNotExist(err) {
			t.Fatalf("temp dir %s still exists (err %v)", base, err)
		}
		if err := c.Start(ctx); err == nil {
			t.Fatal("Start after Close succeeded")
		}
	})
}

func TestStartErrorIncludesLog(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Settings: map[string]string{"no_such_setting_xyz": "1"}})
	if err == nil {
		c.Close()
		t.Fatal("Start succeeded with an invalid setting")
	}
	if !strings.Contains(err.Error(), "no_such_setting_xyz") {
		t.Fatalf("error lacks the server log tail: %v", err)
	}
}

// TestHelperServer is not a real test: TestServerDiesWithParent runs the
// test binary again with PGTEMP_HELPER=1 so that this function starts a
// cluster, prints the postmaster's pid and waits to be killed.
func TestHelperServer(t *testing.T) {
	if os.Getenv("PGTEMP_HELPER") != "1" {
		t.Skip("helper process only")
	}
	c, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	pid, _ := c.PID()
	fmt.Printf("PID %d %s\n", pid, c.baseDir)
	time.Sleep(time.Minute)
	os.Exit(2)
}

// TestServerDiesWithParent checks that a test binary that dies without
// calling Close does not leave its server running.
func TestServerDiesWithParent(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGTEMP_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var pid int
	var dir string
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PID %d %s", &pid, &dir); err == nil {
			break
		}
		if strings.HasPrefix(sc.Text(), "ERR") {
			t.Fatal(sc.Text())
		}
	}
	if pid == 0 {
		t.Fatal("helper did not report a pid")
	}
	defer os.RemoveAll(dir) // the helper had no chance to clean up
	if !alive(pid) {
		t.Fatalf("postmaster %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("postmaster %d survived its parent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The next Start removes the directory the dead binary left.
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed helper's directory: %v", err)
	}
	c, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s, left by a killed test binary, is still there after the next Start (%v)", dir, err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
