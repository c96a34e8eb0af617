package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// The tests of issue 25, the operator's seat: through the real binary,
// against PostgreSQL, with a real HTTP server behind the middleware.

// shop is a POST /charges endpoint behind the middleware, scoped by
// X-Account, whose handler does what mode says.
type shop struct {
	*httptest.Server
	runs atomic.Int64
	mode atomic.Value // string: "uncertain" (idempotency.Uncertain), "panic", "ok", "noeffect"
}

func newShop(e *env, ns string) *shop {
	s := &shop{}
	s.mode.Store("uncertain")
	c := e.newClient(ns)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		switch s.mode.Load().(string) {
		case "uncertain":
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
		case "panic":
			panic("charged, then fell over")
		case "noeffect":
			idempotency.NoEffect(w)
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"charge_id":"ch_run%d"}`, n)
		}
	})
	mw := idempotency.Middleware(c, idempotency.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	s.Server = httptest.NewUnstartedServer(mw(h))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // panics are the point
	s.Start()
	e.t.Cleanup(s.Close)
	return s
}

func (s *shop) post(t *testing.T, account, key, body string) httpReply {
	t.Helper()
	return postCharge(t, s.Server, account, key, body)
}

// printedCommands returns the command lines a text offers to run: the
// lines "  sentinel ...".
func printedCommands(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^  (sentinel .*)$`).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// findCommand returns the one printed command line that starts with
// prefix.
func findCommand(t *testing.T, text, prefix string) string {
	t.Helper()
	var found []string
	for _, c := range printedCommands(text) {
		if strings.HasPrefix(c, prefix) {
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "printed commands starting with %q in:\n%s", prefix, text)
	return found[0]
}

// runPrinted runs a printed command line literally, as a person would in
// their shell on a terminal: `sh -c LINE`, with the binary on PATH as
// `sentinel`, the database connection in the environment (the only thing
// added), and a terminal as stdin on which answers are typed.
func runPrinted(t *testing.T, line, answers string) result {
	t.Helper()
	p := startPrinted(t, line)
	if answers != "" {
		p.typeIn(answers)
	}
	return p.wait()
}

// printed is a printed command running on a terminal.
type printed struct {
	t              *testing.T
	cmd            *exec.Cmd
	tty            *os.File
	stdout, stderr syncBuffer
}

func startPrinted(t *testing.T, line string) *printed {
	t.Helper()
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	go func() { _, _ = io.Copy(io.Discard, ptmx) }() // the terminal's echo
	p := &printed{t: t, tty: ptmx}
	p.cmd = exec.CommandContext(ctxT(t), "sh", "-c", line)
	p.cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start(), line)
	return p
}

func (p *printed) typeIn(s string) {
	_, err := p.tty.Write([]byte(s))
	require.NoError(p.t, err)
}

// printedStuck is how long a printed command may run before wait takes
// it for stuck: it asks every process under the shell for its goroutines
// (SIGQUIT: a Go binary prints them on its stderr, which the failure
// shows) instead of hanging until the package's timeout.
const printedStuck = 90 * time.Second

func (p *printed) wait() result {
	// The shell forks the command: once the shell is gone, a command still
	// holding stdout or stderr keeps Wait from returning; not for longer
	// than this.
	p.cmd.WaitDelay = 5 * time.Second
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(printedStuck):
		for _, pid := range descendants(p.cmd.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
		<-done // the shell and what it ran ended, or WaitDelay passed
		p.t.Fatalf("%v: still running after %v; its stderr (goroutines included):\n%s", p.cmd.Args, printedStuck, p.stderr.String())
	}
	r := result{stdout: p.stdout.String(), stderr: p.stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		p.t.Fatalf("%v: %v", p.cmd.Args, err)
	}
	return r
}

// Issue 25.1: list, idempotency list (with and without --uncertain) cover
// every namespace by default, each row naming its namespace; -n narrows.
// Issue 25.4: handed-back keys are shown as such, and pruned.
func TestEveryNamespaceByDefault(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "charge-job-92")
	s := newShop(e, "shop")
	s.post(t, "cus_42", "k-1", `{"amount":500}`)
	s.mode.Store("noeffect")
	r := s.post(t, "cus_42", "k-2", `{"amount":700}`)
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	_, err := sentinel.Once(ctxT(t), e.client, "retry-me", func(context.Context) (int, error) {
		return 0, sentinel.Retryable(errors.New("card network unreachable"))
	})
	require.Error(t, err)

	out := e.run("list", "--uncertain")
	requireCode(t, out, exitOK)
	require.Regexp(t, `payments\s+charge-job-92\s+UNCERTAIN`, out.stdout)
	require.Regexp(t, `shop\s+idempotency:6:cus_42:k-1\s+UNCERTAIN`, out.stdout)
	require.Contains(t, out.stderr, "every namespace")
	out = e.run("list", "--uncertain", "-n", "default")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stderr, `no executions match in namespace "default"`)
	out = e.run("list", "--uncertain", "-n", "payments", "--json")
	requireCode(t, out, exitOK)
	var page struct{ Executions []execJSON }
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &page))
	require.Len(t, page.Executions, 1)
	require.Equal(t, "payments", page.Executions[0].Namespace)
	requireCode(t, e.run("list", "-n", "payments", "--all-namespaces"), exitUsage)

	out = e.run("list")
	requireCode(t, out, exitOK)
	require.Regexp(t, `default\s+retry-me\s+handed back \(safe to retry\)`, out.stdout)

	out = e.run("idempotency", "list")
	requireCode(t, out, exitOK)
	require.Regexp(t, `UNCERTAIN\s+shop\s+cus_42\s+k-1\s+POST\s+/charges`, out.stdout)
	require.Regexp(t, `handed back \(safe to retry\)\s+shop\s+cus_42\s+k-2\s+POST`, out.stdout)
	require.NotContains(t, out.stdout, "in progress")
	out = e.run("idempotency", "list", "--uncertain")
	requireCode(t, out, exitOK)
	require.Regexp(t, `UNCERTAIN\s+shop\s+cus_42\s+k-1`, out.stdout)
	require.NotContains(t, out.stdout, "k-2")
	out = e.run("idempotency", "list", "--uncertain", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, `no Idempotency-Keys uncertain in namespace "payments"`)
	out = e.run("idempotency", "list", "--json")
	requireCode(t, out, exitOK)
	var keys struct{ Keys []idemKeyJSON }
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &keys))
	require.Len(t, keys.Keys, 2)
	require.True(t, keys.Keys[1].HandedBack)

	out = e.run("status")
	requireCode(t, out, exitOK)
	require.Regexp(t, `default\s+handed back \(safe to retry\)\s+1`, out.stdout)
	require.Regexp(t, `shop\s+handed back \(safe to retry\)\s+1`, out.stdout)
	require.NotContains(t, out.stdout, `\n`, "a literal backslash-n")

	// Pruned like completed keys, after the retention.
	for _, q := range []string{"UPDATE %s.executions SET updated_at = updated_at - interval '2 hours' WHERE state = 'claimed'"} {
		_, err := admin.Exec(ctxT(t), fmt.Sprintf(q, quoteIdent(e.schema)))
		require.NoError(t, err)
	}
	out = e.run("prune", "--older-than", "1h", "--all-namespaces", "--yes", "--json")
	requireCode(t, out, exitOK)
	var pr pruneJSON
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &pr))
	require.Equal(t, int64(2), pr.HandedBack)
	requireCode(t, e.run("inspect", "retry-me"), exitNotFound)
	requireCode(t, e.run("inspect", "charge-job-92", "-n", "payments"), exitOK)
}

// Issue 25.7: status prints no literal \n when nothing is uncertain.
func TestStatusNothingUncertain(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	out := e.run("status")
	requireCode(t, out, exitOK)
	require.NotContains(t, out.stdout, `\n`)
	require.Contains(t, out.stdout, "\n\nno uncertain executions in any namespace\n")
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Issue 25.2 and 25.5: every command printed for a person (the uncertain
// problem's detail, the hints of inspect, reconcile, list, status and the
// idempotency commands, the refusals) runs as printed: each is run here
// literally, through a shell, on a terminal, with only the database
// connection added. The schema is not the default (every command must
// carry --schema), the namespace is "payments", the scope has a space.
func TestPrintedCommandsRunAsPrinted(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	s := newShop(e, "payments")
	const account, key, body = "cus 42", "8e03978e-40d5", `{"amount":500}`

	// The handler cannot tell whether the charge happened: Uncertain.
	r := s.post(t, account, key, body)
	require.Equal(t, 500, r.status, r.body)
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type)
	r = s.post(t, account, key, body) // a retry: the same problem, the handler does not run
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type)
	require.EqualValues(t, 1, s.runs.Load())
	m := regexp.MustCompile(`\((sentinel idempotency inspect [^)]*)\)`).FindStringSubmatch(r.problem.Detail)
	require.NotNil(t, m, r.problem.Detail)
	require.Equal(t, "sentinel idempotency inspect "+key+" --scope 'cus 42' -n payments --schema "+e.schema, m[1])
	inspected := runPrinted(t, m[1], "")
	requireCode(t, inspected, exitOK)
	require.Contains(t, inspected.stdout, "UNCERTAIN")

	// Operators find it with idempotency list --uncertain, which names the
	// inspect command too.
	out := e.run("idempotency", "list", "--uncertain")
	requireCode(t, out, exitOK)
	require.Equal(t, m[1], findCommand(t, out.stdout, "sentinel idempotency inspect"))

	// inspect offers: reconcile (it did not happen) and resolve (it did).
	require.Contains(t, findCommand(t, inspected.stdout, "sentinel reconcile"), " -n payments ")
	resolve := findCommand(t, inspected.stdout, "sentinel idempotency resolve")
	require.NotContains(t, resolve, "--yes")
	// Resolve as printed: it asks for the response on the terminal, then
	// for the confirmation.
	res := runPrinted(t, resolve, "201\nContent-Type: application/json\n\n{\"charge_id\":\"ch_1\"}\n\ny\n")
	requireCode(t, res, exitOK)
	require.Contains(t, res.stdout, "now get 201 Created")
	r = s.post(t, account, key, body)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, `{"charge_id":"ch_1"}`, r.body)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, s.runs.Load())

	// Another key: reconcile as printed, then reset as reconcile printed:
	// the retry runs it.
	r = s.post(t, account, "k-2", body)
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type)
	m = regexp.MustCompile(`\((sentinel idempotency inspect [^)]*)\)`).FindStringSubmatch(r.problem.Detail)
	inspected = runPrinted(t, m[1], "")
	rec := runPrinted(t, findCommand(t, inspected.stdout, "sentinel reconcile"), "y\n")
	requireCode(t, rec, exitOK)
	reset := findCommand(t, rec.stdout, "sentinel reset")
	requireCode(t, runPrinted(t, reset, "y\n"), exitOK)
	s.mode.Store("ok")
	r = s.post(t, account, "k-2", body)
	require.Equal(t, http.StatusCreated, r.status, r.body)

	// A Once key with a declared type: inspect, reconcile, force-complete,
	// each as printed; the value is typed on the terminal.
	pay := e.newClient("payments")
	require.NoError(t, sentinel.RegisterResultType[receipt](ctxT(t), pay, "pay-"))
	e.uncertainKey(pay, "pay-1")
	out = e.run("list", "--uncertain")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "pay-1")
	out = e.run("inspect", "pay-1", "-n", "payments")
	requireCode(t, out, exitOK)
	rec = runPrinted(t, findCommand(t, out.stdout, "sentinel reconcile"), "y\n")
	requireCode(t, rec, exitOK)
	complete := findCommand(t, rec.stdout, "sentinel force-complete")
	require.NotContains(t, complete, "RESULT")
	fc := runPrinted(t, complete, "{\"charge_id\": \"ch_9\",\n \"amount\": 500}\ny\n")
	requireCode(t, fc, exitOK)
	require.Contains(t, fc.stderr, `{"charge_id": string, "amount": integer}`, "the expected shape, shown when asking")
	got, err := sentinel.Once(ctxT(t), pay, "pay-1", func(context.Context) (receipt, error) { return receipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, receipt{ChargeID: "ch_9", Amount: 500}, got.Value)

	// status -n default names the other namespaces and the command that
	// shows them; with more uncertain keys than --limit, the command that
	// lists them all; list pages with the command of the next page.
	e.uncertainKey(pay, "pay-2")
	e.uncertainKey(pay, "pay-3")
	out = e.run("status", "-n", "default")
	requireCode(t, out, exitOK)
	// Other schemas of the shared database may have uncertain executions
	// too, each with its own "sentinel status --schema S" line.
	status := runPrinted(t, findCommand(t, out.stdout, "sentinel status --schema "+e.schema), "")
	requireCode(t, status, exitOK)
	require.Contains(t, status.stdout, "pay-2")
	out = e.run("status", "--limit", "1")
	requireCode(t, out, exitOK)
	more := runPrinted(t, findCommand(t, out.stdout, "sentinel list --uncertain"), "")
	requireCode(t, more, exitOK)
	require.Contains(t, more.stdout, "pay-3")
	out = e.run("list", "--uncertain", "--limit", "1")
	requireCode(t, out, exitOK)
	next := runPrinted(t, findCommand(t, out.stderr, "sentinel list --limit 1 --uncertain --after "), "")
	requireCode(t, next, exitOK)
	require.Contains(t, next.stdout, "pay-3")

	// The generic tools send an HTTP key to resolve, as printed.
	s.mode.Store("panic")
	s.post(t, account, "k-3", body)
	execKey := idempotency.ExecutionKey(account, "k-3")
	requireCode(t, e.run("reconcile", execKey, "-n", "payments", "--yes"), exitOK)
	out = e.run("force-complete", execKey, `{"charge_id":"ch_3"}`, "-n", "payments", "--yes")
	requireCode(t, out, exitUsage)
	res = runPrinted(t, findCommand(t, out.stderr, "sentinel idempotency resolve"), "201\n\n{\"charge_id\":\"ch_3\"}\n\ny\n")
	requireCode(t, res, exitOK)

	// An unmigrated schema: the printed migrate command creates it.
	e2 := newEnv(t)
	out = e2.run("status")
	requireCode(t, out, exitError)
	requireCode(t, runPrinted(t, findCommand(t, out.stderr, "sentinel migrate"), ""), exitOK)
	requireCode(t, e2.run("status"), exitOK)
}

// receipt is the result type of the tests' charges.
type receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// Issue 25.3 through the binary: a value with a typo is refused (exit 4,
// the JSON path, the expected shape) and nothing is written; a correct one
// is stored, and the caller gets it. inspect shows the declared type.
func TestForceCompleteChecksDeclaredType(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	require.NoError(t, sentinel.RegisterResultType[receipt](ctxT(t), pay, "pay-"))
	e.uncertainKey(pay, "pay-7")

	out := e.run("inspect", "pay-7", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, `main.receipt (declared for keys starting with "pay-")`)
	require.Contains(t, out.stdout, `expected shape:  {"charge_id": string, "amount": integer}`)
	out = e.run("inspect", "pay-7", "-n", "payments", "--json")
	requireCode(t, out, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &ex))
	require.NotNil(t, ex.ResultType)
	require.Equal(t, "pay-", ex.ResultType.Prefix)
	require.Contains(t, string(ex.ResultType.Schema), `"additionalProperties": false`)

	requireCode(t, e.run("reconcile", "pay-7", "-n", "payments", "--yes"), exitOK)
	out = e.run("force-complete", "pay-7", `{"chargeid":"ch_1","amount":500}`, "-n", "payments", "--yes")
	requireCode(t, out, exitRefused)
	require.Contains(t, out.stderr, "at $.chargeid: unknown member")
	require.Contains(t, out.stderr, `expected shape (main.receipt): {"charge_id": string, "amount": integer}`)
	out = e.run("force-complete", "pay-7", `{"charge_id":"ch_1","amount":"500"}`, "-n", "payments", "--yes")
	requireCode(t, out, exitRefused)
	require.Contains(t, out.stderr, "at $.amount")
	got, err := pay.Inspect(ctxT(t), "pay-7")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, got.State, "a refused value was written")

	// The value on stdin, as a script would give it.
	out = runBin(t, []string{"DATABASE_URL=" + dbURL}, strings.NewReader(`{"charge_id":"ch_1","amount":500}`),
		"--schema", e.schema, "force-complete", "pay-7", "-n", "payments", "--yes")
	requireCode(t, out, exitOK)
	res, err := sentinel.Once(ctxT(t), pay, "pay-7", func(context.Context) (receipt, error) { return receipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, receipt{ChargeID: "ch_1", Amount: 500}, res.Value)

	// Without a declaration the typo is stored, and the caller gets an
	// error, never a zero value.
	e.uncertainKey(pay, "other-1")
	requireCode(t, e.run("reconcile", "other-1", "-n", "payments", "--yes"), exitOK)
	requireCode(t, e.run("force-complete", "other-1", `{"chargeid":"ch_1","amount":500}`, "-n", "payments", "--yes"), exitOK)
	res, err = sentinel.Once(ctxT(t), pay, "other-1", func(context.Context) (receipt, error) { return receipt{}, errors.New("must not run") })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.Equal(t, receipt{}, res.Value)
	out = e.run("inspect", "other-1", "-n", "payments")
	require.Contains(t, out.stdout, "(stored by an operator)")
	requireCode(t, e.run("set-result", "other-1", `{"charge_id":"ch_1","amount":500}`, "-n", "payments", "--yes"), exitOK)
	res, err = sentinel.Once(ctxT(t), pay, "other-1", func(context.Context) (receipt, error) { return receipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, "ch_1", res.Value.ChargeID)
}

// Issue 25.6: two operators resolve one HTTP key without --token. The
// first inspects it and is asked to confirm; meanwhile the second
// reconciles and resets it, and the retry of the same request claims it
// again and crashes again. The first then confirms: its resolve is refused
// (exit 4), and the newer claim is never completed with the older
// request's response.
func TestResolveRaceKeepsNewerClaim(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	s := newShop(e, "payments")
	s.mode.Store("panic")
	const account, key, body = "cus_42", "race-1", `{"amount":500}`
	s.post(t, account, key, body)
	execKey := idempotency.ExecutionKey(account, key)
	older, err := e.newClient("payments").Inspect(ctxT(t), execKey)
	require.NoError(t, err)

	first := startPrinted(t, fmt.Sprintf("sentinel --schema %s idempotency resolve %s --scope %s -n payments --status 201 --body '{\"charge_id\":\"ch_older\"}'",
		e.schema, key, account))
	waitUntil(t, 30*time.Second, "the first operator is asked to confirm", func() bool {
		return strings.Contains(first.stderr.String(), "[y/N]")
	}, &first.stderr)

	requireCode(t, e.run("reconcile", execKey, "-n", "payments", "--yes"), exitOK)
	requireCode(t, e.run("reset", execKey, "-n", "payments", "--yes"), exitOK)
	r := s.post(t, account, key, body) // the retry runs, and crashes again
	require.Error(t, r.err)
	newer, err := e.newClient("payments").Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	require.Greater(t, newer.Token, older.Token)

	first.typeIn("y\n")
	got := first.wait()
	requireCode(t, got, exitRefused)
	require.Contains(t, got.stderr, fmt.Sprintf("expected token %d", older.Token))

	now, err := e.newClient("payments").Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
	require.Equal(t, newer.Token, now.Token)
	r = s.post(t, account, key, body)
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type, "the newer claim got the older request's response: %s", r.body)
	require.EqualValues(t, 2, s.runs.Load())
}

// descendants are the processes under pid (Linux: /proc's children
// lists), deepest first.
func descendants(pid int) []int {
	var out []int
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		var c int
		if _, err := fmt.Sscan(f, &c); err == nil {
			out = append(append(out, descendants(c)...), c)
		}
	}
	return out
}
