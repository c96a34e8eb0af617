package console

// This file: The executions page: its tabs (Needs an operator first), filters, sections and paging.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// tabs of the executions page: what the state filter accepts.
var tabs = []struct{ ID, Label string }{
	{"attention", "Needs an operator"},
	{"uncertain", "Uncertain"},
	{"reconciling", "Reconciling"},
	{"result-lost", "Result not stored"},
	{"rerun-pending", "Rerun pending"},
	{"executing", "Executing"},
	{"claimed", "Claimed"},
	{"completed", "Completed"},
	{"all", "All"},
}

type listData struct {
	Tabs      []struct{ ID, Label string }
	Tab       string
	Namespace string
	AllNS     bool   // every namespace: the default unless Options.Namespace is set
	DefaultNS string // Options.Namespace
	Before    string
	After     string
	ZoneNotes []string // a time written without a zone, as it was read (UTC)
	Sections  []section
	Error     string
	Down      bool // Error is the database not answering (unreachable)
}

type section struct {
	Heading string
	Note    string
	Rows    []execView
	Next    string // link to the next page; empty on the last
}

// executions is the main page: executions by state, uncertain first.
func (cs *Console) executions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := listData{Tabs: tabs, Tab: q.Get("state"), Namespace: q.Get("ns"), AllNS: q.Get("all") == "1",
		Before: q.Get("before"), After: q.Get("after")}
	if d.Tab == "" {
		d.Tab = "attention"
	}
	d.DefaultNS = cs.opts.Namespace
	switch {
	case d.Namespace != "":
		d.AllNS = false // a namespace typed wins over the box
	case !d.AllNS:
		// Nothing asked: Options.Namespace, else every namespace.
		d.Namespace, d.AllNS = cs.opts.Namespace, cs.opts.Namespace == ""
	}
	base := sentinel.ExecutionFilter{Namespace: d.Namespace, AllNamespaces: d.AllNS, Limit: cs.opts.PageSize, After: q.Get("cursor")}
	if d.AllNS {
		base.Namespace = ""
	}
	var err error
	var beforeUTC, afterUTC bool
	if base.UpdatedBefore, beforeUTC, err = parseTime(d.Before); err == nil {
		base.UpdatedAfter, afterUTC, err = parseTime(d.After)
	}
	// A time written without a zone: say which one it was read in.
	for _, t := range []struct {
		text string
		at   time.Time
		utc  bool
	}{{d.After, base.UpdatedAfter, afterUTC}, {d.Before, base.UpdatedBefore, beforeUTC}} {
		if err == nil && t.utc {
			d.ZoneNotes = append(d.ZoneNotes, fmt.Sprintf("%q has no zone: read as UTC, %s", t.text, t.at.Format("2006-01-02 15:04:05Z")))
		}
	}
	if err != nil {
		d.Error = err.Error()
		cs.render(w, r, http.StatusBadRequest, "executions.html", page{Nav: "executions", Data: d})
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	cs.measureDBClock(r) // which keys rerun pending need an operator: on the database clock
	type want struct {
		tab, heading, note string
		f                  sentinel.ExecutionFilter
		stale              bool // keep only the rows RerunStale
		none               bool // the filters leave no row: not read
	}
	var wants []want
	uncertain, reconciling, lost, rerun := base, base, base, base
	uncertain.Uncertain = true
	reconciling.State = sentinel.StateReconciling
	lost.ResultLost = true
	rerun.RerunPending = true
	// A key rerun pending whose lease ended more than RerunPendingAfter
	// ago needs an operator (sentinel status --exit-code pages on it). Its
	// state was entered before its lease ended, so the rows changed before
	// then hold them all; those whose lease ended later are left out.
	stale := rerun
	if cut := cs.dbNow().Add(-cs.opts.RerunPendingAfter); stale.UpdatedBefore.IsZero() || cut.Before(stale.UpdatedBefore) {
		stale.UpdatedBefore = cut
	}
	// A key reconciling since more than ReconcilingAfter ago needs an
	// operator (status --exit-code pages on it): the start page lists
	// those apart, before the others (entered since the cut). updated_at
	// is when it entered reconciling, which nothing changes meanwhile.
	recStale, recFresh := reconciling, reconciling
	recCut := cs.dbNow().Add(-cs.opts.ReconcilingAfter)
	if recStale.UpdatedBefore.IsZero() || recCut.Before(recStale.UpdatedBefore) {
		recStale.UpdatedBefore = recCut
	}
	if recFresh.UpdatedAfter.IsZero() || recFresh.UpdatedAfter.Before(recCut) {
		recFresh.UpdatedAfter = recCut
	}
	// A section bounded by a cut (stale, recStale, recFresh) that the
	// filter typed (after, before) leaves no room, such as "changed after"
	// 5 minutes ago for the keys rerun pending for more than 15m: it is
	// empty, and not read (Executions refuses an UpdatedAfter not before
	// UpdatedBefore, which failed the whole page).
	empty := func(f sentinel.ExecutionFilter) bool {
		return !f.UpdatedBefore.IsZero() && !f.UpdatedAfter.IsZero() && !f.UpdatedAfter.Before(f.UpdatedBefore)
	}
	recStaleHeading := "Reconciling, needs an operator (for more than " + reltime.Duration(cs.opts.ReconcilingAfter) + ")"
	recStaleNote := "An operator began reconciling these more than " + reltime.Duration(cs.opts.ReconcilingAfter) +
		" ago and has not finished (sentinel status --exit-code pages on them): every caller gets ErrReconciling until one does. " +
		"Force-complete (it happened) or reset to claimed (it did not)."
	staleHeading := "Rerun pending, needs an operator (for more than " + reltime.Duration(cs.opts.RerunPendingAfter) + ")"
	staleNote := "Executing with an expired lease and re-runs left (WithRerun), but no caller with WithRerun came back to run it since its lease ended (Since). " +
		"If none will, find out whether the work happened, then reconcile each one (no caller re-runs it after that)."
	const rerunNote = "Executing with an expired lease and re-runs left (WithRerun): the next caller with WithRerun runs it again, and no operator is needed until one has not come back for a while; " +
		"those are under Needs an operator."
	const lostNote = "Completed: fn succeeded, but its result could not be stored (Result error), so every caller gets ErrResult. Store the value callers should get: the key's page gives the set-result command."
	const uncNote = "Executing with an expired lease: the worker crashed, froze or failed after side effects may have happened. Sentinel will not run them again; reconcile each one."
	const recNote = "An operator started establishing the truth: force-complete (it happened) or reset to claimed (it did not)."
	switch d.Tab {
	case "attention":
		wants = []want{{"uncertain", "Uncertain", uncNote, uncertain, false, false},
			{"reconciling", recStaleHeading, recStaleNote, recStale, false, empty(recStale)},
			{"reconciling", "Reconciling", recNote, recFresh, false, empty(recFresh)},
			{"result-lost", "Result not stored", lostNote, lost, false, false},
			{"rerun-pending", staleHeading, staleNote, stale, true, empty(stale)}}
	case "rerun-pending":
		wants = []want{{d.Tab, "Rerun pending", rerunNote, rerun, false, false}}
	case "uncertain":
		wants = []want{{d.Tab, "Uncertain", uncNote, uncertain, false, false}}
	case "result-lost":
		wants = []want{{d.Tab, "Result not stored", lostNote, lost, false, false}}
	case "reconciling", "executing", "claimed", "completed":
		f := base
		f.State = sentinel.State(d.Tab)
		wants = []want{{d.Tab, strings.ToUpper(d.Tab[:1]) + d.Tab[1:], "", f, false, false}}
	case "all":
		wants = []want{{d.Tab, "All executions", "", base, false, false}}
	default:
		d.Error = fmt.Sprintf("unknown state %q", d.Tab)
		cs.render(w, r, http.StatusBadRequest, "executions.html", page{Nav: "executions", Data: d})
		return
	}
	live := url.Values{}
	if d.AllNS {
		live.Set("all", "1")
	} else if d.Namespace != "" {
		live.Set("ns", d.Namespace)
	}
	head := cs.liveHead(ctx) // before the rows are read: see liveURL
	status := http.StatusOK
	for _, wt := range wants {
		if wt.none {
			d.Sections = append(d.Sections, section{Heading: wt.heading, Note: wt.note})
			continue
		}
		rows, next, err := cs.c.Executions(ctx, wt.f)
		if err != nil {
			d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
			if status >= http.StatusInternalServerError {
				cs.opts.Logger.Error("console: list executions", "err", err)
			}
			break
		}
		s := section{Heading: wt.heading, Note: wt.note}
		hasHTTP := false // an HTTP request's key among the rows
		for _, e := range rows {
			if v := cs.view(e); !wt.stale || v.RerunStale {
				s.Rows = append(s.Rows, v)
				hasHTTP = hasHTTP || isHTTPKey(e.Key)
			}
		}
		if hasHTTP && (wt.note == uncNote || wt.note == staleNote) {
			// Reconcile is the step for a Once key; the middleware's is
			// resolved with a response, as its page and status say.
			s.Note += " An HTTP request's key (idempotency:N:SCOPE:KEY) is resolved with the response its retries get instead: its page gives the command."
		}
		if hasHTTP && (wt.note == recNote || wt.note == recStaleNote) {
			// The console never force-completes one: it is resolved with
			// a response (actionsFor).
			s.Note += " An HTTP request's key (idempotency:N:SCOPE:KEY) is resolved with the response its retries get instead of force-completed: its page offers it."
		}
		if hasHTTP && wt.note == rerunNote {
			s.Note += " An HTTP request's key (idempotency:N:SCOPE:KEY) is run again by the client's repeat of the request (the middleware's Options.Rerun)."
		}
		if next != "" {
			nq := url.Values{}
			for k, v := range q {
				nq[k] = v
			}
			nq.Set("cursor", next)
			if d.Tab == "attention" { // page one section at a time
				nq.Set("state", wt.tab)
			}
			s.Next = "?" + nq.Encode()
		}
		d.Sections = append(d.Sections, s)
	}
	cs.render(w, r, status, "executions.html", page{Nav: "executions", Live: cs.liveURL(ctx, live, head), Data: d})
}

// liveHead is the event history's head before a page is read (see
// liveURL), "" when it could not be read.
func (cs *Console) liveHead(ctx context.Context) string {
	head, err := cs.c.FollowHead(ctx)
	if err != nil {
		cs.opts.Logger.Error("console: read the events' head", "err", err)
		return ""
	}
	return head
}

// liveURL is the live view's events URL for a page just read, head being
// the history's head read before it (liveHead): it follows from there, so
// a change made while the page is read, sent and its script connects is
// announced, not missed. The head is read again now, after the page, as
// "read": the events between the two heads were made while the page was
// read, and it may show them already, so the stream marks them
// (while_read) and the banner does not count them as changes since the
// page was loaded. Without the head (it could not be read) it follows
// from when it connects, as before.
func (cs *Console) liveURL(ctx context.Context, v url.Values, head string) string {
	if head != "" {
		v.Set("after", head)
		if end := cs.liveHead(ctx); end != "" && end != head {
			v.Set("read", end)
		}
	}
	return "events?" + v.Encode()
}

// errStatus is the HTTP status of a failed read: bad input, the database
// not answering (unreachable: 503) or a failure.
func errStatus(err error) int {
	switch {
	case errors.Is(err, sentinel.ErrInvalid):
		return http.StatusBadRequest
	case unreachable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// parseTime accepts RFC 3339 and the browser's datetime-local format,
// which has no zone: read as UTC (utc true), the zone of every time the
// pages show.
func parseTime(s string) (t time.Time, utc bool, err error) {
	if s == "" {
		return time.Time{}, false, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, false, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true, nil
		}
	}
	return time.Time{}, false, fmt.Errorf("time %q: use RFC 3339 (2026-11-22T09:30:00Z) or YYYY-MM-DDTHH:MM (UTC)", s)
}
