package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

const opToken = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // 256 bits, as `openssl rand -hex 32` makes

const hostileKey = `<script>alert("x")</script>'"&amp; ключ 🔑`

func server(t *testing.T, c *sentinel.Client, opts console.Options) *httptest.Server {
	t.Helper()
	h, err := console.New(c, opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h)) // mounted under a prefix, as a user would
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// confirmForm opens the confirmation page of an action and returns the
// form's fields.
func confirmForm(t *testing.T, base, action, ns, key string, token int64) url.Values {
	t.Helper()
	code, body := get(t, base+"/ops/confirm?"+url.Values{"action": {action}, "ns": {ns}, "key": {key}, "token": {strconv.FormatInt(token, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	return url.Values{"action": {action}, "ns": {ns}, "key": {key}, "token": {strconv.FormatInt(token, 10)},
		"csrf": {html.UnescapeString(m[1])}, "operator": {"Ada"}, "operator_token": {opToken}}
}

func post(t *testing.T, base string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/ops/act", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestNewValidates(t *testing.T) {
	c, _ := newClient(t)
	_, err := console.New(c, console.Options{})
	require.Error(t, err, "actions without a token")
	_, err = console.New(nil, console.Options{ReadOnly: true})
	require.Error(t, err)
	_, err = console.New(c, console.Options{ReadOnly: true, PageSize: -1})
	require.Error(t, err)
	_, err = console.New(c, console.Options{ReadOnly: true})
	require.NoError(t, err)
}

func TestPagesEscapeAndList(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, hostileKey)
	uncertain(t, c, "plain-key")
	_, err := sentinel.Once(ctx, c, "done-key", func(context.Context) (map[string]string, error) {
		return map[string]string{"html": "<b>bold</b>"}, nil
	})
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#39;&#34;&amp;amp; ключ 🔑")
	require.Contains(t, body, "plain-key")
	require.NotContains(t, body, "done-key", "completed keys are not on the default tab")
	require.Contains(t, body, "Uncertain")
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options"} {
		resp, err := http.Get(s.URL + "/ops/")
		require.NoError(t, err)
		resp.Body.Close()
		require.NotEmpty(t, resp.Header.Get(h), h)
	}

	code, body = get(t, s.URL+"/ops/?state=completed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "done-key")

	// The hostile key's own page: its name, history and actions, all text.
	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {hostileKey}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, body, "started")
	require.Contains(t, body, "Reconcile…")

	code, body = get(t, s.URL+"/ops/key?ns=default&key=done-key")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<pre id="stored-result">`)
	require.Contains(t, body, `bold`)
	require.NotContains(t, body, "<b>")
	require.NotContains(t, body, "Reconcile…")

	code, _ = get(t, s.URL+"/ops/key?ns=default&key=nope")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, s.URL+"/ops/?state=bogus")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, s.URL+"/ops/?before=yesterday")
	require.Equal(t, http.StatusBadRequest, code)

	// Paging: with a page size of 1, a next link that works.
	s1 := server(t, c, console.Options{ReadOnly: true, PageSize: 1})
	_, body = get(t, s1.URL+"/ops/?state=uncertain")
	m := regexp.MustCompile(`class="next" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	code, body2 := get(t, s1.URL+"/ops/"+html.UnescapeString(m[1]))
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, body, body2)
}

func TestActionsGuarded(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	key := hostileKey
	uncertain(t, c, key)
	ex, err := c.Inspect(ctx, key)
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	form := confirmForm(t, s.URL, "reconcile", "default", key, ex.Token)

	// No operator token, a wrong one: refused, nothing written.
	for _, tok := range []string{"", "wrong", opToken + "x"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set("operator_token", tok)
		code, body := post(t, s.URL, f)
		require.Equal(t, http.StatusForbidden, code, body)
		require.Contains(t, body, "operator token")
	}
	// A forged or tampered CSRF token, a form for another key, another site.
	bad := url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	code, _ := post(t, s.URL, bad)
	require.Equal(t, http.StatusForbidden, code)
	bad = url.Values{}
	for k, v := range form {
		bad[k] = v
	}
	bad.Set("key", "plain-key")
	code, _ = post(t, s.URL, bad)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, s.URL, form, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, code)
	// No name.
	noName := url.Values{}
	for k, v := range form {
		noName[k] = v
	}
	noName.Del("operator")
	code, _ = post(t, s.URL, noName)
	require.Equal(t, http.StatusBadRequest, code)
	now, err := c.Inspect(ctx, key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
	require.Equal(t, ex.Token, now.Token)

	// The real thing.
	code, body := post(t, s.URL, form)
	require.Equal(t, http.StatusOK, code, body)
	rec, err := c.Inspect(ctx, key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, rec.State)
	hist, err := c.History(ctx, key)
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reconciling", last.Type)
	require.Equal(t, "Ada", last.Metadata["operator_name"])
	require.Equal(t, "console", last.Metadata["via"])

	// Replaying the same form: the key moved on (new token), refused.
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "moved on")

	// Force-complete: bad JSON refused; a form for the old token refused.
	fc := confirmForm(t, s.URL, "force_complete", "default", key, rec.Token)
	fc.Set("value", `{"id": "pay_1",`)
	code, _ = post(t, s.URL, fc)
	require.Equal(t, http.StatusBadRequest, code)
	stale := confirmForm(t, s.URL, "force_complete", "default", key, ex.Token)
	stale.Set("value", `1`)
	code, body = post(t, s.URL, stale)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "moved on")
	// The confirmation page already warns about a stale token.
	_, page := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {key}, "token": {strconv.FormatInt(ex.Token, 10)}}.Encode())
	require.Contains(t, page, `id="moved"`)

	fc.Set("value", `{"id": "pay_1", "amount": 9900}`)
	code, body = post(t, s.URL, fc)
	require.Equal(t, http.StatusOK, code, body)
	res, err := sentinel.Once(ctx, c, key, func(context.Context) (map[string]any, error) {
		t.Fatal("fn must not run after force-complete")
		return nil, nil
	})
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, "pay_1", res.Value["id"])
}

func TestReadOnly(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	rw := server(t, c, console.Options{OperatorToken: opToken})
	form := confirmForm(t, rw.URL, "reconcile", "default", "k", ex.Token)

	ro := server(t, c, console.Options{ReadOnly: true, OperatorToken: opToken})
	code, body := get(t, ro.URL+"/ops/key?ns=default&key=k")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "Reconcile…")
	require.Contains(t, body, "read-only")
	code, _ = get(t, ro.URL+"/ops/confirm?action=reconcile&ns=default&key=k&token=1")
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, ro.URL, form)
	require.Equal(t, http.StatusForbidden, code)
	now, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
}

// The live stream carries events as JSON, keys as data (never markup).
func TestEventsStream(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/ops/events?ns=default", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	time.Sleep(200 * time.Millisecond)
	_, err = sentinel.Once(ctxT(t), c, hostileKey, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	var evType string // the event: line of the event read; "execution" for execution events
	var got []map[string]any
	for len(got) < 3 && sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			evType = v
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && evType == "execution" {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			got = append(got, m)
		}
	}
	require.Len(t, got, 3)
	require.Equal(t, hostileKey, got[0]["key"])
	require.Equal(t, "claimed", got[0]["type"])
	require.Equal(t, "completed", got[2]["type"])
}

// Serve listens on loopback by default and ends, live streams included,
// when its ctx ends.
func TestServe(t *testing.T) {
	c, _ := newClient(t)
	h, err := console.New(c, console.Options{ReadOnly: true})
	require.NoError(t, err)
	require.True(t, console.IsLoopback(console.DefaultAddr))
	require.True(t, console.IsLoopback("[::1]:80"))
	require.True(t, console.IsLoopback("localhost:80"))
	require.False(t, console.IsLoopback(":8380"))
	require.False(t, console.IsLoopback("0.0.0.0:8380"))

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- console.Serve(ctx, "127.0.0.1:0", h, func(a net.Addr) { addrc <- a.String() })
	}()
	base := "http://" + <-addrc
	code, body := get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Executions")
	resp, err := http.Get(base + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not end with a live stream open")
	}
	_, err = io.ReadAll(resp.Body) // the stream ended
	require.NoError(t, err)
}

// Reset to claimed from the console: the next Once runs fn again, and the
// history names the operator.
func TestResetAction(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken, Operator: func(r *http.Request) string { return r.Header.Get("X-User") }})
	form := confirmForm(t, s.URL, "reconcile", "default", "k", ex.Token)
	form.Del("operator") // the name comes from Options.Operator
	code, body := post(t, s.URL, form, "X-User", "grace@example.com")
	require.Equal(t, http.StatusOK, code, body)
	rec, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	form = confirmForm(t, s.URL, "reset", "default", "k", rec.Token)
	code, body = post(t, s.URL, form, "X-User", "grace@example.com")
	require.Equal(t, http.StatusOK, code, body)
	hist, err := c.History(ctx, "k")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reset", last.Type)
	require.Equal(t, "grace@example.com", last.Metadata["operator_name"])
	ran := false
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { ran = true; return 1, nil })
	require.NoError(t, err)
	require.True(t, ran)
	// Without the header the action is refused: no name.
	uncertain(t, c, "k2")
	ex2, err := c.Inspect(ctx, "k2")
	require.NoError(t, err)
	code, _ = post(t, s.URL, confirmForm(t, s.URL, "reconcile", "default", "k2", ex2.Token))
	require.Equal(t, http.StatusBadRequest, code)
}

// Issue 17.8: a browser that reconnects with Last-Event-ID misses nothing,
// not even an event whose transaction committed, with a lower ID than the
// last one shown, while it was disconnected.
func TestEventsStreamResumesWithLastEventID(t *testing.T) {
	c, schema := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 20 * time.Millisecond})
	ctx := ctxT(t)
	type sse struct {
		id  string
		key string
	}
	// stream reads n execution events from a new connection.
	stream := func(lastID string, n int, during func()) []sse {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(sctx, http.MethodGet, s.URL+"/ops/events?ns=default", nil)
		require.NoError(t, err)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		time.Sleep(200 * time.Millisecond) // the follow holds its position
		if during != nil {
			during()
		}
		sc := bufio.NewScanner(resp.Body)
		var evType string // the event: line of the event read; "execution" for execution events
		var got []sse
		var id string
		for len(got) < n && sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				evType = v
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && evType == "execution" {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(data), &m))
				got = append(got, sse{id: id, key: m["key"].(string)})
			}
		}
		require.Len(t, got, n)
		return got
	}
	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	first := stream("", 3, func() {
		_, err := slow.Exec(ctx, `INSERT INTO "`+schema+`".events (namespace, key, event, state, token, owner)
			VALUES ('default', 'slow', 'manual', 'completed', 1, 'test')`)
		require.NoError(t, err)
		_, err = sentinel.Once(ctx, c, "fast", func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	})
	require.NoError(t, slow.Commit(ctx)) // while no stream is open
	second := stream(first[2].id, 1, nil)
	require.Equal(t, "slow", second[0].key, "resumed from Last-Event-ID %q", first[2].id)
}

// Options.Elsewhere: every page names the other schemas with uncertain
// executions, each with a command that runs as printed.
func TestPagesNameUncertainSchemasElsewhere(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, Elsewhere: func(context.Context) ([]string, error) {
		return []string{"bill ing"}, nil
	}})
	for _, path := range []string{"/ops/", "/ops/leases", "/ops/elections"} {
		code, body := get(t, s.URL+path)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="uncertain-elsewhere"`, path)
		require.Contains(t, html.UnescapeString(body), "<code>sentinel status --schema 'bill ing'</code>", path)
		require.Contains(t, html.UnescapeString(body), "No uncertain keys in any namespace of schema", path)
	}
	// The status line carries the console's thresholds when they are not
	// the defaults, so that it judges the keys there as the console does.
	s = server(t, c, console.Options{ReadOnly: true, RerunPendingAfter: 10 * time.Minute, ReconcilingAfter: 2 * time.Hour,
		Elsewhere: func(context.Context) ([]string, error) { return []string{"billing"}, nil }})
	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, html.UnescapeString(body), "<code>sentinel status --rerun-pending-after 10m --reconciling-after 2h --schema billing</code>")
}

// refusedOnce runs a Once of key whose fn returns (v, fnErr) after its
// hard TTL ended its lease: the completion is refused, fn's outcome is
// the history's evidence, and the key is uncertain.
func refusedOnce[T any](t *testing.T, c *sentinel.Client, key string, v T, fnErr error) {
	t.Helper()
	_, err := sentinel.Once(ctxT(t), c, key, func(ctx context.Context) (T, error) {
		started := time.Now()
		<-ctx.Done() // the hard TTL ends the lease
		time.Sleep(time.Until(started.Add(800 * time.Millisecond)))
		return v, fnErr
	}, sentinel.WithTTL(500*time.Millisecond), sentinel.WithHardTTL(500*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
}

// Options.Elsewhere (sentinel serve's reads every schema) is called once
// for a burst of pages, not once per page.
func TestElsewhereKeptBriefly(t *testing.T) {
	c, _ := newClient(t)
	var calls atomic.Int32
	s := server(t, c, console.Options{ReadOnly: true, Elsewhere: func(context.Context) ([]string, error) {
		calls.Add(1)
		return []string{"billing"}, nil
	}})
	for _, path := range []string{"/ops/", "/ops/leases", "/ops/elections", "/ops/"} {
		code, body := get(t, s.URL+path)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="uncertain-elsewhere"`, path)
	}
	require.Equal(t, int32(1), calls.Load(), "Options.Elsewhere was called for every page")
}
