package sentineltest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const staleChildEnv = "SENTINELTEST_STALE_CHILD"

// TestStaleSchemaChild is the child of TestStaleSchemasRemoved: a test
// binary that creates its schema, says its name and waits to be killed.
func TestStaleSchemaChild(t *testing.T) {
	if os.Getenv(staleChildEnv) == "" {
		t.Skip("child process of TestStaleSchemasRemoved")
	}
	if os.Getenv(staleChildEnv) == "sweep-now" {
		staleAfter, ownerSilence = 0, 0 // before the first test asks for the database
	}
	os.Stdout.WriteString("SCHEMA " + Schema(t) + "\n")
	time.Sleep(time.Hour)
}

// startStaleChild runs a test binary on url and returns its schema.
func startStaleChild(t *testing.T, url, mode string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStaleSchemaChild$", "-test.timeout=5m")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvURL+"=") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, EnvURL+"="+url, staleChildEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var schema string // the child's, dropped once it is killed: its cleanups never run
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if schema == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop the child's schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop the child's schema %s: %v", schema, err)
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if name, ok := strings.CutPrefix(s.Text(), "SCHEMA "); ok {
				line <- name
				return
			}
		}
		close(line)
	}()
	select {
	case name, ok := <-line:
		if !ok {
			t.Fatal("the child ended without naming its schema")
		}
		schema = name
		return cmd, name
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not name its schema in 60s")
	}
	return nil, ""
}

// A test binary SIGKILLed before its cleanups leaves its schema; the next
// binary drops it at its first test, once the schema is old enough, and
// never drops a schema whose owner is alive (this binary's, a running
// child's).
func TestStaleSchemasRemoved(t *testing.T) {
	url := DatabaseURL(t)
	mine := Schema(t)
	var children []string
	t.Cleanup(func() { // runs last: the killed children left nothing on the server
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var left []string
		for _, s := range children {
			var ok bool
			if err := conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)", s).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			if ok {
				left = append(left, s)
			}
		}
		if len(left) > 0 {
			t.Errorf("the killed children's schemas %v are left on the server", left)
		}
	})

	dead, deadSchema := startStaleChild(t, url, "wait")
	_, liveSchema := startStaleChild(t, url, "wait")
	if err := dead.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	if !schemaExists(t, deadSchema) {
		t.Fatalf("the killed child's schema %s is already gone", deadSchema)
	}

	// Too young to be dropped: kept.
	conn, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	dropped, err := sweepStale(ctxT(t), conn, -1, time.Hour)
	if err != nil || slices.Contains(dropped, deadSchema) {
		t.Fatalf("sweep with a 1h age dropped %v, %v", dropped, err)
	}
	if !schemaExists(t, deadSchema) {
		t.Fatal("a schema younger than the age limit was dropped")
	}

	// A new binary (age limit 0) removes it as it starts; the schemas of
	// live owners stay.
	_, newSchema := startStaleChild(t, url, "sweep-now")
	children = append(children, deadSchema, liveSchema, newSchema)
	if schemaExists(t, deadSchema) {
		t.Fatalf("schema %s of a killed binary survived the next binary's start", deadSchema)
	}
	for _, s := range []string{mine, liveSchema, newSchema} {
		if !schemaExists(t, s) {
			t.Fatalf("schema %s of a live owner was dropped", s)
		}
	}
	// Schemas not named by this version are never touched.
	if _, err := conn.Exec(ctxT(t), `CREATE SCHEMA sentineltest_0123456789ab`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS sentineltest_0123456789ab`) //nolint:errcheck
	if dropped, err = sweepStale(ctxT(t), conn, -1, 0); err != nil || slices.Contains(dropped, "sentineltest_0123456789ab") {
		t.Fatalf("sweep dropped %v, %v", dropped, err)
	}
}
