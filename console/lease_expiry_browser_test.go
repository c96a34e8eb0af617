package console_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// startWorker runs a worker process on key with lease TTL ttl, waits until
// it is inside fn, and returns what kills it (SIGKILL: no event written;
// the key is left executing, uncertain once its lease expires). It is
// killed at the end of the test in any case. env is added to the
// worker's environment (SENTINEL_CHILD_RERUN=2: Once with WithRerun(2)).
func startWorker(t *testing.T, schema, key string, ttl time.Duration, env ...string) (kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+schema,
		"SENTINEL_CHILD_KEY="+key, "SENTINEL_CHILD_TTL="+ttl.String())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	kill = func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(kill)
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
			return
		}
		line <- "EOF"
	}()
	select {
	case l := <-line:
		require.Equal(t, "INSIDE", strings.TrimSpace(l))
	case <-time.After(30 * time.Second):
		t.Fatal("worker never entered fn")
	}
	return kill
}

// A page left open showed a running key as executing long after its
// worker died: the lease expires without an event, so the live view said
// nothing of that row, and only a reload showed it uncertain. Now, once
// the lease's expiry as read has passed, the page reads the key's state
// again: the dead worker's row (on the executions page and on the key's
// page) is marked uncertain as a reload marks it, while the row of a
// worker alive, whose lease was renewed, still says executing. In a real
// browser.
func TestBrowserRowOfAnExpiredLeaseIsMarkedUncertain(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	killDead := startWorker(t, schema, "pay-dies", 3*time.Second)
	startWorker(t, schema, "pay-lives", 3*time.Second)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	list, key := browser(t), browser(t)
	require.NoError(t, chromedp.Run(list, chromedp.Navigate(s.URL+"/ops/?state=all"), chromedp.WaitVisible(`#read-at`, chromedp.ByID)))
	require.NoError(t, chromedp.Run(key, chromedp.Navigate(s.URL+"/ops/key?ns=default&key=pay-dies"), chromedp.WaitVisible(`#key-state`, chromedp.ByID)))
	rowState := func(k string) (state, class string) {
		var r []string
		require.NoError(t, chromedp.Run(list, chromedp.Evaluate(`(() => { const tr = document.querySelector('tr[data-key='+JSON.stringify(`+jsString(k)+`)+']'); return tr ? [tr.cells[2].innerText, tr.className] : ["", ""]; })()`, &r)))
		return r[0], r[1]
	}
	st, _ := rowState("pay-dies")
	require.Equal(t, "executing", st, "as read: its worker runs")
	killDead()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, cls := rowState("pay-dies")
		if st == "uncertain" {
			require.Contains(t, cls, "uncertain")
			break
		}
		require.True(t, time.Now().Before(deadline), "the dead worker's lease expired long ago and its row still says %q", st)
		time.Sleep(200 * time.Millisecond)
	}
	var keyState string
	deadline = time.Now().Add(10 * time.Second)
	for {
		require.NoError(t, chromedp.Run(key, chromedp.Evaluate(`document.getElementById("key-state").innerText`, &keyState)))
		if strings.HasPrefix(keyState, "uncertain") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, keyState, "uncertain executing, and its lease expired: the outcome is unknown", "the key page says %q", keyState)
	st, cls := rowState("pay-lives")
	require.Equal(t, "executing", st, "a live worker's lease is renewed: its row is not marked")
	require.NotContains(t, cls, "uncertain")
}
