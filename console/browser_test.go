package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// chromePath finds a Chromium binary: $SENTINEL_CHROME, else the usual names.
func chromePath() string {
	if p := os.Getenv("SENTINEL_CHROME"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromePath()
	if path == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1360, 900),
	)
	actx, cancelA := chromedp.NewExecAllocator(ctxT(t), opts...)
	// The Chromium of the machine is newer than the protocol chromedp
	// knows: events it cannot decode ("unknown IPAddressSpace value:
	// Loopback") are logged by the thousand and bury a failure's output.
	// They are events the tests do not read; other errors still show.
	ctx, cancelB := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if strings.Contains(msg, "could not unmarshal event") {
			return
		}
		log.Printf("chromedp: %s", msg) // not t.Logf: it may come after the test ended
	}))
	t.Cleanup(func() {
		cancelB()
		cancelA()
	})
	require.NoError(t, chromedp.Run(ctx), "start chromium")
	return ctx
}

// shot saves a screenshot of the page into docs/ when SENTINEL_SCREENSHOTS=1.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("SENTINEL_SCREENSHOTS") != "1" {
		return
	}
	var buf []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&buf, 100)))
	p := filepath.Join("..", "docs", "console-"+name+".png")
	require.NoError(t, os.WriteFile(p, buf, 0o644))
	t.Logf("screenshot %s (%d bytes)", p, len(buf))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// openKey clicks the link of key's row on the executions page.
func openKey(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	var ok bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`table tbody tr[data-key]`, chromedp.ByQuery),
		chromedp.Evaluate(fmt.Sprintf(`(() => {
			const r = [...document.querySelectorAll('tr[data-key]')].find(r => r.dataset.key === %s);
			if (!r) return false;
			r.querySelector('td.key a').click();
			return true;
		})()`, jsString(key)), &ok)))
	require.True(t, ok, "row of key %q not on the page", key)
	var shown string
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#key-name`, chromedp.ByID), chromedp.Text(`#key-name`, &shown, chromedp.ByID)))
	require.Equal(t, key, shown)
}

// clickLink clicks the first link whose text starts with prefix and waits
// for the page it leads to (by a selector of that page).
func clickLink(t *testing.T, ctx context.Context, prefix, waitFor string) {
	t.Helper()
	var ok bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(() => {
		const a = [...document.querySelectorAll('a')].find(a => a.textContent.trim().startsWith(%s));
		if (!a) return false;
		a.click();
		return true;
	})()`, jsString(prefix)), &ok)))
	require.True(t, ok, "no link %q", prefix)
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(waitFor, chromedp.ByQuery)))
}

// formAgain checks that the page is a refused form shown again: the form,
// in the answer to its POST (the address is the form's target, with no
// query: what was typed is in no URL).
func formAgain(t *testing.T, ctx context.Context) {
	t.Helper()
	var loc string
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#confirm-button`, chromedp.ByID), chromedp.Location(&loc)))
	u, err := url.Parse(loc)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(u.Path, "/act"), "the refused form is shown at %q", loc)
	require.Empty(t, u.RawQuery, "the refused form's address carries a query: %q", loc)
}

// submitted clicks button and waits for the page the form's answer: a
// refused form's answer is a page with the form again (formAgain), so the
// page clicked on is marked to tell the two apart.
func submitted(button string) []chromedp.Action {
	return []chromedp.Action{
		chromedp.Evaluate(`document.documentElement.setAttribute("data-submitted", "")`, nil),
		chromedp.Click(button, chromedp.ByQuery),
		chromedp.WaitVisible(`html:not([data-submitted]) #message-heading`, chromedp.ByQuery),
	}
}

// confirmAs fills the confirmation form and submits it; it returns the
// result page's heading and text.
func confirmAs(t *testing.T, ctx context.Context, name, token, value string) (string, string) {
	t.Helper()
	actions := []chromedp.Action{chromedp.WaitVisible(`#confirm-button`, chromedp.ByID)}
	if value != "" {
		actions = append(actions, chromedp.SetValue(`#value`, value, chromedp.ByID))
	}
	actions = append(actions,
		chromedp.SendKeys(`#operator`, name, chromedp.ByID),
		chromedp.SendKeys(`#reason`, "checked with the payment provider", chromedp.ByID),
		// The browser's own "required" check would stop an empty token
		// before the server sees it; the server must refuse it too.
		chromedp.Evaluate(`document.getElementById('operator_token').removeAttribute('required')`, nil),
	)
	if token != "" {
		actions = append(actions, chromedp.SendKeys(`#operator_token`, token, chromedp.ByID))
	}
	var heading, text string
	actions = append(actions, submitted(`#confirm-button`)...)
	actions = append(actions,
		chromedp.Text(`#message-heading`, &heading, chromedp.ByID),
		chromedp.Text(`#message-text`, &text, chromedp.ByID),
	)
	require.NoError(t, chromedp.Run(ctx, actions...))
	return heading, text
}

func waitUncertain(t *testing.T, c *sentinel.Client, key string) *sentinel.Execution {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ex, err := c.Inspect(ctxT(t), key)
		require.NoError(t, err)
		if ex.State == sentinel.StateExecuting && !ex.LeaseAlive {
			return ex
		}
		require.True(t, time.Now().Before(deadline), "key %q never became uncertain", key)
		time.Sleep(100 * time.Millisecond)
	}
}

// The whole operator story in a real browser: a worker process is killed
// inside fn; the operator finds the uncertain key, reconciles it and
// force-completes it with a value; the next Once replays that value. Also:
// no operator token, a stale token and a hostile key.
func TestBrowserReconciliation(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	h, err := console.New(c, console.Options{OperatorToken: opToken, PollInterval: 50 * time.Millisecond, Title: "Sentinel · payments"})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t) // closed before the server: its live stream ends first

	const key = "payment-order-789"
	killWorker(t, schema, key)
	uncertain(t, c, hostileKey)
	// A refused completion with evidence: fn outlives its hard TTL.
	_, err = sentinel.Once(ctxT(t), c, "charge-refused", func(ctx context.Context) (map[string]any, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+1s
		<-ctx.Done()          // the lease ends at the hard TTL
		// past its expiry on the database clock too, however late the
		// claim committed on a loaded machine
		time.Sleep(time.Until(started.Add(1300 * time.Millisecond)))
		return map[string]any{"id": "ch_42", "amount": 1250, "note": `<img src=x onerror=alert(1)>`}, nil
	}, sentinel.WithTTL(time.Second), sentinel.WithHardTTL(time.Second))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), c, "invoice-2026-0042", func(context.Context) (string, error) { return "sent", nil })
	require.NoError(t, err)
	first := waitUncertain(t, c, key)

	// The list: the killed worker's key, uncertain; the hostile key as text.
	var rowText string
	var scripts int
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible(`tr.uncertain`, chromedp.ByQuery),
		chromedp.Evaluate(fmt.Sprintf(`[...document.querySelectorAll('tr[data-key]')].find(r => r.dataset.key === %s).innerText`, jsString(key)), &rowText),
		chromedp.Evaluate(`document.querySelectorAll('script').length`, &scripts),
	))
	require.Contains(t, rowText, key)
	require.Contains(t, rowText, "uncertain")
	require.Contains(t, rowText, fmt.Sprint(first.Token))
	require.Equal(t, 1, scripts, "only the console's own script")
	var hostileText string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`[...document.querySelectorAll('tr[data-key]')].find(r => r.dataset.key === %s).querySelector('td.key').textContent.trim()`,
		jsString(hostileKey)), &hostileText)))
	require.Equal(t, hostileKey, hostileText)
	shot(t, ctx, "executions")

	// The killed worker's key: reconcile it without the token (refused),
	// then with it.
	openKey(t, ctx, key)
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	heading, text := confirmAs(t, ctx, "Ada Lovelace", "", "")
	require.Contains(t, heading, "Refused")
	require.Contains(t, text, "operator token")
	ex, err := c.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State, "nothing changed without the token")

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/")))
	openKey(t, ctx, key)
	shot(t, ctx, "key-uncertain")
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	shot(t, ctx, "confirm")
	heading, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, heading, "done")
	ex, err = c.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)
	require.Greater(t, ex.Token, first.Token)

	// Force-complete with a value.
	clickLink(t, ctx, "← Back", "#key-name")
	clickLink(t, ctx, "Force-complete", "#confirm-button")
	heading, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, `{"id": "pay_789", "amount": 9900}`)
	require.Contains(t, heading, "done")
	ex, err = c.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.JSONEq(t, `{"id": "pay_789", "amount": 9900}`, string(ex.Result))
	hist, err := c.History(ctxT(t), key)
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "force_completed", last.Type)
	require.Equal(t, "Ada Lovelace", last.Metadata["operator_name"])
	type receipt struct {
		ID     string `json:"id"`
		Amount int    `json:"amount"`
	}
	res, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (receipt, error) {
		return receipt{}, errors.New("fn must not run again")
	})
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, receipt{"pay_789", 9900}, res.Value)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/key?ns=default&key="+key), chromedp.WaitVisible(`#history`, chromedp.ByID)))
	shot(t, ctx, "key-completed")

	// The refused completion's evidence: reconcile, then one click uses
	// fn's own result.
	refused := waitUncertain(t, c, "charge-refused")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/")))
	openKey(t, ctx, "charge-refused")
	var evidence string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`pre.refused-result`, &evidence, chromedp.ByQuery)))
	require.Contains(t, evidence, "ch_42")
	require.Contains(t, evidence, "onerror") // shown as text
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	heading, _ = confirmAs(t, ctx, "Grace Hopper", opToken, "")
	require.Contains(t, heading, "done")
	clickLink(t, ctx, "← Back", "#key-name")
	shot(t, ctx, "key-evidence")

	// A stale token: the operator opens the confirmation, someone else
	// resets the key meanwhile; the action is refused and says why.
	clickLink(t, ctx, "Force-complete with this result", "#confirm-button")
	var prefilled string
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#value`, chromedp.ByID), chromedp.Value(`#value`, &prefilled, chromedp.ByID)))
	require.Contains(t, prefilled, "ch_42")
	rec, err := c.Inspect(ctxT(t), "charge-refused")
	require.NoError(t, err)
	require.Greater(t, rec.Token, refused.Token)
	require.NoError(t, c.ResetToClaimed(ctxT(t), "charge-refused", sentinel.WithToken(rec.Token)))
	_, err = sentinel.Once(ctxT(t), c, "charge-refused", func(context.Context) (int, error) { return 0, errors.New("again") })
	require.Error(t, err) // runs again and fails: uncertain at a newer token
	heading, text = confirmAs(t, ctx, "Grace Hopper", opToken, "")
	require.Contains(t, heading, "refused")
	require.Contains(t, text, "moved on")
	shot(t, ctx, "refused")
	now, err := c.Inspect(ctxT(t), "charge-refused")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State, "the stale action changed nothing")

	// The key was reset and ran again: reconcile the new uncertainty. The
	// refused completion was the earlier run's, reset since: it is not
	// offered as this run's result; the operator who confirmed the charge
	// types the value.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/")))
	openKey(t, ctx, "charge-refused")
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	heading, _ = confirmAs(t, ctx, "Grace Hopper", opToken, "")
	require.Contains(t, heading, "done")
	clickLink(t, ctx, "← Back", "#key-name")
	var offered bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`!!document.querySelector('[id^="use-refused-"]')`, &offered)))
	require.False(t, offered, "an earlier run's refused result offered as this run's")
	clickLink(t, ctx, "Force-complete…", "#confirm-button")
	heading, _ = confirmAs(t, ctx, "Grace Hopper", opToken, `{"id":"ch_42","amount":1250}`)
	require.Contains(t, heading, "done")
	done, err := c.Inspect(ctxT(t), "charge-refused")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, done.State)
	require.Contains(t, string(done.Result), "ch_42")

	// Live view: with JavaScript on, a change elsewhere shows up.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	time.Sleep(300 * time.Millisecond)
	uncertain(t, c, "late-arrival")
	var banner string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`#live-events li`, chromedp.ByQuery),
		chromedp.Text(`#live-banner`, &banner, chromedp.ByID)))
	require.True(t, strings.Contains(banner, "change"), banner)
	shot(t, ctx, "live")
}

// A guard against serving the console over a plain mux without the
// prefix: links are relative, so it works at any mount point.
func TestMountedAtRoot(t *testing.T) {
	c, _ := newClient(t)
	h, err := console.New(c, console.Options{ReadOnly: true})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	resp, err := http.Get(s.URL + "/static/live.js")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// shotURL saves a screenshot of one page into docs/ when
// SENTINEL_SCREENSHOTS=1 (and Chromium is installed); otherwise it does
// nothing.
func shotURL(t *testing.T, u, name string) {
	t.Helper()
	if os.Getenv("SENTINEL_SCREENSHOTS") != "1" || chromePath() == "" {
		return
	}
	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(u), chromedp.WaitVisible(`main`, chromedp.ByQuery)))
	shot(t, ctx, name)
}
