package console

// This file: The live view's event stream (server-sent events).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// events streams execution events as server-sent events, for the live view.
func (cs *Console) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	f := sentinel.FollowFilter{Namespace: q.Get("ns"), AllNamespaces: q.Get("all") == "1", PollInterval: cs.opts.PollInterval}
	if f.AllNamespaces {
		f.Namespace = ""
	}
	if k := q.Get("key"); k != "" {
		f.Keys = []string{k}
	}
	// The SSE id of each event is its Follow cursor (Event.Cursor): the
	// browser sends the last one back as Last-Event-ID when it reconnects,
	// and the stream resumes with nothing missed. An event ID is a cursor
	// too, so ?after=ID and older ids keep working.
	// A reconnection's Last-Event-ID is further on than the page's ?after
	// (the head when the page was read): it wins, so nothing is
	// delivered twice.
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		f.Cursor = id
	} else if after := q.Get("after"); after != "" {
		f.Cursor = after
	}
	// ?read is the head read after the page (see liveURL): an event it
	// covers was made while the page was read, and may be on it.
	var whileRead func(id int64) bool
	if rd := q.Get("read"); rd != "" {
		var err error
		if whileRead, err = cursorCovers(rd); err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	// The stream starts once Follow holds its position: a cursor (or
	// filter) Follow refuses gets 400 instead of a stream. It starts
	// earlier when the database does not answer meanwhile (watchDatabase),
	// to say so. mu serialises the writes of Follow's goroutine and of the
	// watcher, and guards the state below.
	//
	// The page is told "live" (status) only when Follow holds its
	// position, the database answered the watcher's last ping, and Follow
	// has read the events since (OnRead): after an outage Follow retries
	// on its own back-off (up to 5s apart), and a ping that answers says
	// nothing of when it reads again. Until then the page says it is
	// paused or connecting.
	var mu sync.Mutex
	var (
		started   bool // the stream's header is written
		following bool // OnStart was called
		down      bool // the watcher's last ping failed
		read      bool // Follow read the events since the database last answered a ping after failing
		live      bool // the page was last told "live"
	)
	start := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(w, ": sentinel live events\nretry: 2000\n\n")
		fl.Flush()
	}
	// status tells the page whether it follows the events now (see
	// live.js): live false while the database does not answer.
	status := func(on bool, detail string) {
		live = on
		b, _ := json.Marshal(struct {
			Live   bool   `json:"live"`
			Detail string `json:"detail,omitempty"`
		}{on, detail})
		_, _ = fmt.Fprintf(w, "event: status\ndata: %s\n\n", b)
		fl.Flush()
	}
	maybeLive := func() {
		if started && following && read && !down && !live {
			status(true, "")
		}
	}
	f.OnRead = func() {
		mu.Lock()
		defer mu.Unlock()
		read = true
		maybeLive()
	}
	f.OnStart = func() {
		mu.Lock()
		defer mu.Unlock()
		following = true
		start()
		maybeLive()
	}
	// attention sends the counts at the top of the pages (AttentionCounts,
	// the keys rerun pending too long, rerunStale, and the keys reconciling
	// too long, reconcilingStale) when they differ from the last sent (the
	// first always): a key becomes uncertain when its lease expires, one
	// rerun pending goes stale Options.RerunPendingAfter later, one
	// reconciling Options.ReconcilingAfter after it began, and nothing
	// writes an event then; the page compares them with its own (see
	// live.js). A stale count nil: not read (its kind, rerun_stale or
	// reconciling_stale, is not sent; the page compares the others).
	var lastCounts []byte
	attention := func(counts []sentinel.StateCount, stale staleCounts) {
		kinds := map[string]map[string]int64{"uncertain": {}, "reconciling": {}, "result_lost": {}}
		for _, c := range counts {
			k := "reconciling"
			switch {
			case c.Uncertain:
				k = "uncertain"
			case c.ResultLost:
				k = "result_lost"
			}
			kinds[k][c.Namespace] += c.Count
		}
		if stale.rerun != nil {
			kinds["rerun_stale"] = stale.rerun
		}
		if stale.reconciling != nil {
			kinds["reconciling_stale"] = stale.reconciling
		}
		b, _ := json.Marshal(struct {
			Counts map[string]map[string]int64 `json:"counts"`
			At     string                      `json:"at"`
			// RerunAfter: Options.RerunPendingAfter, as the pages write it;
			// ReconcilingAfter: Options.ReconcilingAfter.
			RerunAfter       string `json:"rerun_after"`
			ReconcilingAfter string `json:"reconciling_after"`
		}{kinds, cs.dbNow().UTC().Format(time.RFC3339Nano), reltime.Duration(cs.opts.RerunPendingAfter), reltime.Duration(cs.opts.ReconcilingAfter)})
		key, _ := json.Marshal(kinds)
		if bytes.Equal(key, lastCounts) {
			return
		}
		lastCounts = key
		_, _ = fmt.Fprintf(w, "event: attention\ndata: %s\n\n", b)
		fl.Flush()
	}
	wctx, stopWatch := context.WithCancel(r.Context())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		cs.watchDatabase(wctx, func(counts []sentinel.StateCount, stale staleCounts, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil && counts != nil && started {
				attention(counts, stale)
			}
			switch {
			case err != nil && !down:
				down, read = true, false
				start()
				status(false, err.Error())
			case err == nil && down:
				// Follow may still be sleeping out its back-off: live
				// once it has read again (OnRead).
				down, read = false, false
				maybeLive()
			}
		})
	}()
	type wire struct {
		ID        int64  `json:"id"`
		Namespace string `json:"namespace"`
		Key       string `json:"key"`
		Type      string `json:"type"`
		State     string `json:"state"`
		Token     int64  `json:"token"`
		Owner     string `json:"owner"`
		At        string `json:"at"`
		Link      string `json:"link"`
		// WhileRead: made while the page was read (?read covers it), so
		// the page may show it already.
		WhileRead bool `json:"while_read,omitempty"`
	}
	err := cs.c.Follow(r.Context(), f, func(ev sentinel.Event) error {
		mu.Lock()
		defer mu.Unlock()
		b, err := json.Marshal(wire{ev.ID, ev.Namespace, ev.Key, ev.Type, string(ev.State), ev.Token, ev.Owner,
			ev.At.UTC().Format(time.RFC3339Nano), keyLink(ev.Namespace, ev.Key), whileRead != nil && whileRead(ev.ID)})
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %s\nevent: execution\ndata: %s\n\n", ev.Cursor, b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	stopWatch()
	<-watched
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started && errors.Is(err, sentinel.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case !started:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		b, _ := json.Marshal(err.Error()) // a JSON string: live.js reads it
		_, _ = fmt.Fprintf(w, "event: failure\ndata: %s\n\n", b)
		fl.Flush()
	}
}

// A live stream asks the database whether it answers every liveCheckEvery,
// waiting liveCheckWait for the answer: Follow retries a lost connection
// quietly (and misses nothing), and the page must say meanwhile that it is
// not following. Every liveCountsEvery it reads the counts at the top of
// the pages instead (AttentionCounts: one statement over two small
// partial indexes; then the keys rerun pending too long, rerunStale, and
// those reconciling too long, reconcilingStale), which answers the same
// question.
const (
	liveCheckEvery  = time.Second
	liveCheckWait   = 2 * time.Second
	liveCountsEvery = 5 * time.Second
)

// staleCounts are the keys that need an operator once they have been in
// their state too long, per namespace, as watchDatabase read them: rerun
// pending (rerunStale's answer) and reconciling (reconcilingStale's);
// either nil when not read.
type staleCounts struct {
	rerun, reconciling map[string]int64
}

// watchDatabase asks the database every liveCheckEvery until ctx ends,
// and calls report with each answer (err nil: the database answered;
// counts, when not nil, AttentionCounts' answer, with stale).
func (cs *Console) watchDatabase(ctx context.Context, report func(counts []sentinel.StateCount, stale staleCounts, err error)) {
	t := time.NewTicker(liveCheckEvery)
	defer t.Stop()
	var countedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, liveCheckWait)
		var counts []sentinel.StateCount
		var stale staleCounts
		var err error
		if now := time.Now(); now.Sub(countedAt) >= liveCountsEvery {
			countedAt = now
			counts, err = cs.c.AttentionCounts(pctx)
			switch {
			case err != nil && !unreachable(err):
				// It answered, with an error: not an outage.
				cs.opts.Logger.Error("console: live view: count the keys that need an operator", "err", err)
				counts, err = nil, nil
			case err == nil && counts == nil:
				counts = []sentinel.StateCount{} // none: still an answer
			}
			if err == nil && counts != nil {
				var serr error
				if _, stale.rerun, serr = cs.rerunStale(pctx); serr != nil {
					// Not counted this time: the page compares the others.
					cs.opts.Logger.Error("console: live view: count keys rerun pending", "err", serr)
					stale.rerun = nil
				}
				if _, stale.reconciling, serr = cs.reconcilingStale(pctx, counts); serr != nil {
					cs.opts.Logger.Error("console: live view: count keys reconciling", "err", serr)
					stale.reconciling = nil
				}
			}
		} else {
			err = cs.c.Pool().Ping(pctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", liveCheckWait)
		}
		report(counts, stale, err)
	}
}

// cursorCovers reads a head (Client.FollowHead, in the form of
// Event.Cursor: "ID" or "ID:GAPS", GAPS being comma-separated IDs and
// LO-HI ranges not committed yet when it was read) and returns whether an
// event ID was committed before it: at most ID and in no gap.
func cursorCovers(cursor string) (func(id int64) bool, error) {
	bad := fmt.Errorf("not a cursor of the events' head: %.64q", cursor)
	if len(cursor) > 1<<16 {
		return nil, bad
	}
	head, tail, _ := strings.Cut(cursor, ":")
	hi, err := strconv.ParseInt(head, 10, 64)
	if err != nil || hi < 0 {
		return nil, bad
	}
	type span struct{ lo, hi int64 }
	var gaps []span
	if tail != "" {
		for _, part := range strings.Split(tail, ",") {
			los, his, isRange := strings.Cut(part, "-")
			lo, err := strconv.ParseInt(los, 10, 64)
			if err != nil {
				return nil, bad
			}
			g := span{lo, lo}
			if isRange {
				if g.hi, err = strconv.ParseInt(his, 10, 64); err != nil || g.hi < lo {
					return nil, bad
				}
			}
			gaps = append(gaps, g)
		}
	}
	return func(id int64) bool {
		if id > hi {
			return false
		}
		for _, g := range gaps {
			if id >= g.lo && id <= g.hi {
				return false
			}
		}
		return true
	}, nil
}
