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
