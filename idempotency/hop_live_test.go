package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// liveReply is a response as the client saw it, with the informational
// (1xx) responses before it.
type liveReply struct {
	resp    *http.Response
	body    string
	infos   []int
	infoHdr []textproto.MIMEHeader
}

func postLive(t *testing.T, url, key string) liveReply {
	t.Helper()
	var mu sync.Mutex
	var out liveReply
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		out.infos = append(out.infos, code)
		out.infoHdr = append(out.infoHdr, h)
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctxT(t), trace), "POST", url, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idempotency.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out.resp, out.body = resp, string(b)
	return out
}

// A handler that set Connection: close on its response (to shed a
// client, or before a restart) had it dropped from the live response, as
// from the stored one: the connection stayed open. The live response
// keeps it now; the stored one (replays) still does not.
func TestLiveResponseKeepsConnectionClose(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusCreated)
	})
	first := postLive(t, srv.URL, "conn-close")
	if first.resp.StatusCode != http.StatusCreated || !first.resp.Close {
		t.Fatalf("first response: %d, Close=%v, header %v: want 201 closing the connection", first.resp.StatusCode, first.resp.Close, first.resp.Header)
	}
	replay := postLive(t, srv.URL, "conn-close")
	if replay.resp.Header.Get(idempotency.HeaderReplayed) != "true" || replay.resp.Close {
		t.Fatalf("replay: %v, Close=%v: want a replay that leaves the connection alone", replay.resp.Header, replay.resp.Close)
	}
}

// Informational responses (103 Early Hints) the handler wrote were
// swallowed: the client never got them. They go out live now, with the
// header as it was then, and are never stored: the final status is.
func TestInformationalResponsesGoOutLive(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</receipt.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	first := postLive(t, srv.URL, "hints")
	if len(first.infos) != 1 || first.infos[0] != http.StatusEarlyHints || first.infoHdr[0].Get("Link") == "" {
		t.Fatalf("informational responses %v %v: want one 103 with its Link", first.infos, first.infoHdr)
	}
	if first.resp.StatusCode != http.StatusCreated || first.body != "charged" || first.resp.Header.Get("Link") != "" {
		t.Fatalf("final response %d %q %v: want 201 without the hint's Link", first.resp.StatusCode, first.body, first.resp.Header)
	}
	replay := postLive(t, srv.URL, "hints")
	if replay.resp.StatusCode != http.StatusCreated || replay.body != "charged" || replay.resp.Header.Get(idempotency.HeaderReplayed) != "true" || len(replay.infos) != 0 {
		t.Fatalf("replay %d %q %v, infos %v: want the stored 201 alone", replay.resp.StatusCode, replay.body, replay.resp.Header, replay.infos)
	}
}

// A header the handler named in its Connection header (Connection:
// close, X-Trace) is hop-by-hop (RFC 9110 section 7.6.1): it describes
// this connection, not the response. It was stored and replayed as any
// other; it goes out on the first response only now.
func TestConnectionNamedHeadersNotStored(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Connection", "close, X-Trace")
		h.Add("connection", " x-hop-note ")
		h.Set("X-Trace", "conn-secret-1")
		h["x-hop-note"] = []string{"conn-secret-2"}
		h.Set("Trailer", "X-Trace-End")
		h.Set("X-Kept", "kept")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
		h.Set("X-Trace-End", "trailer-kept")
	})
	first := postLive(t, srv.URL, "conn-named")
	if first.resp.StatusCode != http.StatusCreated || first.resp.Header.Get("X-Trace") != "conn-secret-1" || first.resp.Header.Get("X-Hop-Note") != "conn-secret-2" {
		t.Fatalf("first response %d %v: want 201 with the handler's X-Trace and X-Hop-Note", first.resp.StatusCode, first.resp.Header)
	}
	replay := postLive(t, srv.URL, "conn-named")
	if replay.resp.StatusCode != http.StatusCreated || replay.resp.Header.Get(idempotency.HeaderReplayed) != "true" ||
		replay.resp.Header.Get("X-Kept") != "kept" || replay.body != "ok" || replay.resp.Trailer.Get("X-Trace-End") != "trailer-kept" {
		t.Fatalf("replay %d %q %v trailer %v: want the stored 201 with X-Kept and its trailer", replay.resp.StatusCode, replay.body, replay.resp.Header, replay.resp.Trailer)
	}
	for _, k := range []string{"X-Trace", "X-Hop-Note"} {
		if v := replay.resp.Header.Values(k); len(v) != 0 {
			t.Errorf("the replay carries the hop-by-hop %s %q", k, v)
		}
	}
	var stored bool
	if err := c.Pool().QueryRow(ctxT(t), "SELECT bool_or(position('conn-secret' in convert_from(result, 'UTF8')) > 0) FROM executions").Scan(&stored); err != nil || stored {
		t.Fatalf("a header named in Connection was stored (%v)", err)
	}
	got := idempotency.StoredHeader(http.Header{"Connection": {"keep-alive, X-A"}, "X-A": {"1"}, "X-B": {"2"}})
	if len(got) != 1 || got.Get("X-B") != "2" {
		t.Fatalf("StoredHeader = %v, want X-B alone", got)
	}
}
