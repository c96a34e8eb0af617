package console

// This file: What every page shares: the page frame and its render (the header's counts, Options.Elsewhere), messages, an execution's view, the template functions.

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
	"github.com/sentinel-coordination/sentinel/internal/shell"
)

// page is what every template gets.
type page struct {
	Title    string
	Views    []navItem
	Nav      string // the active tab
	ReadOnly bool
	Live     string // the events URL for the live view; empty: none
	Data     any
	// Uncertain counts the uncertain keys of every namespace, shown at
	// the top of every page, and Reconciling the reconciling ones (an
	// operator began, callers get ErrReconciling until one finishes);
	// UncertainErr says why they could not be counted. ResultLost counts
	// the completed keys whose result was not stored (callers get
	// ErrResult until an operator stores it).
	Uncertain   []nsCount
	Reconciling []nsCount
	ResultLost  []nsCount
	// RerunStale counts the keys rerun pending whose lease ended more than
	// Options.RerunPendingAfter ago (execView.RerunStale), of the first
	// rerunStaleRead rerun pending keys; RerunAfter is that threshold.
	RerunStale []nsCount
	RerunAfter string
	// ReconcilingStale counts the keys reconciling for longer than
	// Options.ReconcilingAfter (execView.ReconcilingStale), of the first
	// rerunStaleRead of them; ReconcilingAfter is that threshold. They are
	// counted in Reconciling too.
	ReconcilingStale []nsCount
	ReconcilingAfter string
	UncertainErr     string
	// UncertainDown: UncertainErr is the database not answering
	// (unreachable): the page says so, and to reload it once it answers.
	UncertainDown bool
	// ReadAt is when the page was rendered, on the database clock (the
	// clock of every time the page shows, dbNow): a page without a live
	// view says so, since what it shows goes stale.
	ReadAt time.Time
	// Schema is the client's schema; Elsewhere the other schemas holding
	// keys that need an operator (Options.Elsewhere), each with the
	// sentinel status command that shows them (carrying the console's
	// thresholds); ElsewhereErr says why they could not be read.
	Schema        string
	Elsewhere     []schemaNote
	ElsewhereErr  string
	ElsewhereDown bool // ElsewhereErr is the database not answering
	// WaitDB: a page read (GET) while the database did not answer: with
	// JavaScript on it waits for the database over the live stream (Live,
	// set for it when the page has no live view of its own) and reloads
	// itself once the stream reads again (see live.js).
	WaitDB bool
	// Posted: the page answers a POST (a refused form shown again): a
	// reload would send the form again, so the page does not offer one.
	Posted bool
}

// downer is the data of a page that says when its read found the database
// not answering.
type downer interface{ dbDown() bool }

func (d listData) dbDown() bool      { return d.Down }
func (d leasesData) dbDown() bool    { return d.Down }
func (d queuesData) dbDown() bool    { return d.Down }
func (d electionsData) dbDown() bool { return d.Down }
func (m message) dbDown() bool       { return m.Down }

// schemaNote is another schema with uncertain executions.
type schemaNote struct {
	Schema, Command string
}

// nsCount is a namespace's count of uncertain keys, with the link that
// lists them.
type nsCount struct {
	Namespace string
	Count     int64
	Link      string
}

func (cs *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Title = cs.opts.Title
	p.ReadOnly = cs.opts.ReadOnly
	cs.measureDBClock(r)
	if name != "message.html" { // a result of a POST: not to be reloaded
		p.ReadAt = cs.dbNow()
	}
	p.Posted = r.Method == http.MethodPost
	for _, v := range views() {
		p.Views = append(p.Views, navItem{Path: v.path, Label: v.label})
	}
	// Every page says where operators are needed (uncertain, reconciling
	// and result-lost keys), whatever it shows: one statement over two
	// small partial indexes.
	ctx, cancel := ctxTimeout(r)
	counts, err := cs.c.AttentionCounts(ctx)
	cancel()
	if err != nil {
		p.UncertainErr, p.UncertainDown = err.Error(), unreachable(err)
	}
	for _, c := range counts {
		to, tab := &p.Reconciling, "reconciling"
		switch {
		case c.Uncertain:
			to, tab = &p.Uncertain, "uncertain"
		case c.ResultLost:
			to, tab = &p.ResultLost, "result-lost"
		}
		*to = append(*to, nsCount{Namespace: c.Namespace, Count: c.Count,
			Link: "./?" + url.Values{"state": {tab}, "ns": {c.Namespace}}.Encode()})
	}
	if err == nil {
		p.RerunStale, p.RerunAfter = cs.rerunStaleCounts(r), reltime.Duration(cs.opts.RerunPendingAfter)
		p.ReconcilingStale, p.ReconcilingAfter = cs.reconcilingStaleCounts(r, counts), reltime.Duration(cs.opts.ReconcilingAfter)
	}
	p.Schema = cs.c.Config().Schema
	if cs.opts.Elsewhere != nil {
		schemas, err := cs.elsewhereNow(r)
		if err != nil {
			p.ElsewhereErr, p.ElsewhereDown = err.Error(), unreachable(err)
		}
		for _, s := range schemas {
			cmd := "sentinel status"
			for _, f := range cs.thresholdFlags() {
				cmd += " " + shell.Quote(f)
			}
			p.Elsewhere = append(p.Elsewhere, schemaNote{Schema: s, Command: cmd + " --schema " + shell.Quote(s)})
		}
	}
	// A page read while the database does not answer is no use once it
	// answers: it waits for it and reloads itself. Only a GET: reloading a
	// POST's result would send the action again.
	if d, ok := p.Data.(downer); r.Method == http.MethodGet && (p.UncertainDown || ok && d.dbDown()) {
		p.WaitDB = true
		if p.Live == "" {
			p.Live = "events"
		}
	}
	var buf bytes.Buffer
	if err := cs.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		cs.opts.Logger.Error("console: render", "template", name, "err", err)
		http.Error(w, "console: could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// rerunStaleRead bounds the rerun pending keys rerunStaleCounts reads,
// and the reconciling ones reconcilingStaleCounts reads.
const rerunStaleRead = 1000

// rerunStaleCounts counts per namespace, for the top of every page, the
// keys rerun pending whose lease ended more than Options.RerunPendingAfter
// ago: they need an operator (sentinel status --exit-code counts them),
// though AttentionCounts does not count them. A read that fails counts
// none (the start page's list says why).
func (cs *Console) rerunStaleCounts(r *http.Request) []nsCount {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	names, counts, err := cs.rerunStale(ctx)
	if err != nil {
		cs.opts.Logger.Error("console: count keys rerun pending", "err", err)
		return nil
	}
	var out []nsCount
	for _, ns := range names {
		out = append(out, nsCount{Namespace: ns, Count: counts[ns],
			Link: "./?" + url.Values{"state": {"attention"}, "ns": {ns}}.Encode()})
	}
	return out
}

// rerunStale counts per namespace the keys rerun pending whose lease
// ended more than Options.RerunPendingAfter ago (execView.RerunStale), of
// the first rerunStaleRead rerun pending keys: names in the order read,
// for the top of every page (rerunStaleCounts) and the live view's count
// check (watchDatabase).
func (cs *Console) rerunStale(ctx context.Context) (names []string, counts map[string]int64, err error) {
	rows, _, err := cs.c.Executions(ctx, sentinel.ExecutionFilter{RerunPending: true, AllNamespaces: true,
		UpdatedBefore: cs.dbNow().Add(-cs.opts.RerunPendingAfter), Limit: rerunStaleRead})
	if err != nil {
		return nil, nil, err
	}
	counts = map[string]int64{}
	for _, e := range rows {
		if !cs.view(e).RerunStale {
			continue
		}
		if _, ok := counts[e.Namespace]; !ok {
			names = append(names, e.Namespace)
		}
		counts[e.Namespace]++
	}
	return names, counts, nil
}

// reconcilingStaleCounts counts per namespace, for the top of every page,
// the keys reconciling for longer than Options.ReconcilingAfter: they need
// an operator (sentinel status --exit-code pages on them). counts is
// AttentionCounts' answer: a namespace whose oldest reconciling key is
// younger is not read. A read that fails counts none.
func (cs *Console) reconcilingStaleCounts(r *http.Request, counts []sentinel.StateCount) []nsCount {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	names, n, err := cs.reconcilingStale(ctx, counts)
	if err != nil {
		cs.opts.Logger.Error("console: count keys reconciling", "err", err)
		return nil
	}
	var out []nsCount
	for _, ns := range names {
		out = append(out, nsCount{Namespace: ns, Count: n[ns],
			Link: "./?" + url.Values{"state": {"attention"}, "ns": {ns}}.Encode()})
	}
	return out
}

// reconcilingStale counts per namespace the keys reconciling for longer
// than Options.ReconcilingAfter (execView.ReconcilingStale), of the first
// rerunStaleRead of them, for the top of every page
// (reconcilingStaleCounts) and the live view's count check
// (watchDatabase): names in the order read. counts is AttentionCounts'
// answer: when no namespace's oldest reconciling key (StateCount.Oldest)
// is old enough, nothing more is read.
func (cs *Console) reconcilingStale(ctx context.Context, counts []sentinel.StateCount) (names []string, n map[string]int64, err error) {
	n = map[string]int64{}
	cut := cs.dbNow().Add(-cs.opts.ReconcilingAfter)
	old := false
	for _, c := range counts {
		old = old || c.State == sentinel.StateReconciling && c.Oldest.Before(cut)
	}
	if !old {
		return nil, n, nil
	}
	rows, _, err := cs.c.Executions(ctx, sentinel.ExecutionFilter{State: sentinel.StateReconciling, AllNamespaces: true,
		UpdatedBefore: cut, Limit: rerunStaleRead})
	if err != nil {
		return nil, nil, err
	}
	for _, e := range rows {
		if !cs.view(e).ReconcilingStale {
			continue
		}
		if _, ok := n[e.Namespace]; !ok {
			names = append(names, e.Namespace)
		}
		n[e.Namespace]++
	}
	return names, n, nil
}

// dbClockFresh is how long a measure of the database clock's offset from
// the console's is used (measureDBClock).
const dbClockFresh = 30 * time.Second

// measureDBClock measures the database clock's offset from the console's
// (SELECT clock_timestamp(), against the console's clock halfway through
// the round trip) when the last measure is older than dbClockFresh: the
// times a page shows were written by the database, and a relative time
// ("3.1s ago", "in 12s") counted from the console's own clock was off by
// the offset of the two (sentinel serve on a laptop whose clock is
// minutes off: an expired lease read "in 9m58s, expired"). A measure that
// fails keeps the last one (zero at first).
func (cs *Console) measureDBClock(r *http.Request) {
	d := &cs.dbClock
	d.Lock()
	defer d.Unlock()
	if now := cs.now(); !d.at.IsZero() && now.Sub(d.at) < dbClockFresh && !now.Before(d.at) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	sent := cs.now()
	var db time.Time
	if err := cs.c.Pool().QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&db); err != nil {
		return
	}
	got := cs.now()
	d.at, d.offset = got, db.Sub(sent.Add(got.Sub(sent)/2))
}

// dbNow is now on the database clock, as far as the console knows it: its
// own clock plus the database's offset from it (measureDBClock).
func (cs *Console) dbNow() time.Time {
	d := &cs.dbClock
	d.Lock()
	defer d.Unlock()
	return cs.now().Add(d.offset)
}

// elsewhereFresh is how long an answer of Options.Elsewhere is kept:
// every page shows it, and sentinel serve's reads every schema of the
// database (a query or more each), so a burst of pages (or several
// operators' tabs) would repeat it for each.
const elsewhereFresh = 5 * time.Second

// elsewhereNow is Options.Elsewhere's answer, read again once
// elsewhereFresh has passed since the last one; pages rendered meanwhile
// wait for the one read under way. An answer cut short by its request's
// end (the operator left the page) is not kept.
func (cs *Console) elsewhereNow(r *http.Request) ([]string, error) {
	e := &cs.elsewhere
	e.Lock()
	defer e.Unlock()
	if now := cs.now(); e.at.IsZero() || now.Sub(e.at) >= elsewhereFresh || now.Before(e.at) {
		ctx, cancel := ctxTimeout(r)
		schemas, err := cs.opts.Elsewhere(ctx)
		cancel()
		if r.Context().Err() != nil {
			return schemas, err
		}
		e.at, e.schemas, e.err = now, schemas, err
	}
	return e.schemas, e.err
}

type navItem struct{ Path, Label string }

// message renders a page with a title and a sentence: errors, refusals,
// results.
type message struct {
	Heading string
	Text    string
	Kind    string // "ok", "refused", "error"
	Back    string // a link back, relative
	// Down: the database did not answer a read (unreachable): the page
	// says so and offers to reload it (a GET page); Text is the driver's
	// error, shown as a detail.
	Down bool
	Exec *execView
	// Elsewhere: the key is in these other namespaces (notHere); More
	// others are not linked.
	Elsewhere []nsLink
	More      int
}

// nsLink is a link to something in a namespace.
type nsLink struct{ Namespace, Link string }

func (cs *Console) fail(w http.ResponseWriter, r *http.Request, status int, heading, text, back string) {
	cs.render(w, r, status, "message.html", page{Data: message{Heading: heading, Text: text, Kind: "error", Back: back}})
}

// failRead renders a read of a GET page that failed: when the database
// did not answer (unreachable), the page says so plainly, with the
// driver's text as a detail, and offers to reload it (503); otherwise
// heading and the error's text (status).
func (cs *Console) failRead(w http.ResponseWriter, r *http.Request, status int, heading string, err error, back string) {
	if unreachable(err) {
		cs.render(w, r, http.StatusServiceUnavailable, "message.html", page{Data: message{Heading: heading + ": the database does not answer",
			Text: err.Error(), Kind: "error", Back: back, Down: true}})
		return
	}
	cs.fail(w, r, status, heading, err.Error(), back)
}

// unreachable reports whether err is the database not answering: it
// cannot be reached, the connection was lost, it is starting or shutting
// down, or it did not answer in time (a page's ctxTimeout). Sentinel
// retries these where it waits (a lease, a follower); a page says so, and
// to reload it once the database answers.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || // connection exception
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" // shutdown, crash, cannot connect now
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.As(err, &connErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// execView is an execution as the pages show it.
type execView struct {
	sentinel.Execution
	Uncertain  bool
	HandedBack bool // claimed with no live lease: nothing runs it, the next caller does
	// RerunPending: executing, stopped with re-runs left (WithRerun,
	// Execution.Rerunnable): the next caller with WithRerun runs it
	// again; no operator is needed unless RerunStale.
	RerunPending bool
	// RerunStale: RerunPending, and its lease ended more than
	// Options.RerunPendingAfter ago: no caller with WithRerun came back,
	// so it needs an operator (as sentinel status --exit-code says).
	RerunStale bool
	// ReconcilingStale: reconciling, entered more than
	// Options.ReconcilingAfter ago (ReconcilingAfter, as the pages write
	// it): the operator who began never force-completed or reset it, so it
	// needs an operator (as sentinel status --exit-code says).
	ReconcilingStale bool
	ReconcilingAfter string
	// HardHeld: HardExpiresAt bounds the claim of the row's holder
	// (executing, or claimed with a live lease). HardPast: the row keeps
	// a hard expiry that bounds nothing, a claim that ended (handed back:
	// claimed with no live lease, as a reset leaves it); the page says
	// there is none, and whose the kept one was (hardExpiry).
	HardHeld, HardPast bool
	// ResultLost: completed, but fn's result was not stored
	// (ExecutionFilter.ResultLost): callers get ErrResult.
	ResultLost bool
	Link       string
	// Effect is the key's effect key (Execution.EffectKey), what fn got
	// from sentinel.EffectKey to pass to a provider that deduplicates.
	Effect string
	// LeaseLeftMS is the lease time left at the read, in milliseconds,
	// on the database clock (Execution.LeaseLeft): live.js counts it
	// down on the browser's monotonic clock, which no clock's offset
	// (the browser's, the console's) moves.
	LeaseLeftMS int64
	// Since is when the key entered the state shown (Execution.Since): for
	// a key whose lease ended (uncertain, rerun pending, handed back by a
	// caller that gave up) the lease's end, as sentinel inspect and list
	// show it; else UpdatedAt.
	Since time.Time
}

func (cs *Console) view(e sentinel.Execution) execView {
	rerun := e.Rerunnable()
	recStale := e.State == sentinel.StateReconciling && cs.dbNow().Sub(e.UpdatedAt) > cs.opts.ReconcilingAfter
	recAfter := ""
	if recStale {
		recAfter = reltime.Duration(cs.opts.ReconcilingAfter)
	}
	return execView{ReconcilingStale: recStale, ReconcilingAfter: recAfter, RerunStale: rerun && cs.dbNow().Sub(e.Since()) > cs.opts.RerunPendingAfter, Execution: e, Uncertain: e.State == sentinel.StateExecuting && !e.LeaseAlive && !e.Rerunnable(),
		HandedBack: e.State == sentinel.StateClaimed && !e.LeaseAlive, RerunPending: rerun,
		ResultLost: e.ResultLost(),
		HardHeld:   hardHeld(e), HardPast: hardPast(e),
		Link: keyLink(e.Namespace, e.Key), Effect: e.EffectKey(), LeaseLeftMS: e.LeaseLeft().Milliseconds(),
		Since: e.Since()}
}

// hardHeld reports whether e's hard expiry bounds the claim of its
// holder: a worker executing fn, or one that claimed it and holds a live
// lease. An operator's step keeps the worker's value in the row (reset
// hands the key back with it, reconcile and force-complete end the
// lease), as does a caller that hands the key back: it then bounds
// nothing (hardPast).
func hardHeld(e sentinel.Execution) bool {
	return !e.HardExpiresAt.IsZero() && !e.LeaseExpiresAt.IsZero() &&
		(e.State == sentinel.StateExecuting || e.State == sentinel.StateClaimed && e.LeaseAlive)
}

// hardPastNote is what the key page says after "none" in its Hard expiry
// row for a key that keeps the hard expiry t of a claim that ended
// (hardPast); lease-state answers it (hard_past) for live.js to redraw
// the row as a reload shows it.
func hardPastNote(t time.Time) string {
	return "(nothing holds the key; " + t.UTC().Format("2006-01-02 15:04:05.000Z") + " was the previous holder's)"
}

// hardPast reports whether e keeps the hard expiry of a claim that ended:
// handed back (claimed with no live lease: by a reset, or by a caller that
// gave up), nothing holds the key.
func hardPast(e sentinel.Execution) bool {
	return !e.HardExpiresAt.IsZero() && e.State == sentinel.StateClaimed && !e.LeaseAlive
}

func keyLink(ns, key string) string {
	return "key?" + url.Values{"ns": {ns}, "key": {key}}.Encode()
}

func (cs *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"stateNote": func(v execView) string { return cs.stateNote(v) },
		"badge":     stateBadge,
		// hardPastNote's words hold no markup and its one variable is a
		// formatted time: as HTML, its apostrophe stays as typed.
		"hardPastNote": func(t time.Time) template.HTML { return template.HTML(hardPastNote(t)) },
		"rfc":          func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		// age is how far t is from when the page is read ("3.1s ago",
		// "in 1m05s"), in a <small class="age"> that carries t:
		// live.js counts it on, and says when a time that was ahead has
		// passed since the page was read (see live.js).
		"age": func(t time.Time) template.HTML {
			if t.IsZero() {
				return ""
			}
			return template.HTML(`<small class="age" data-t="` + t.UTC().Format(time.RFC3339Nano) + `">` +
				template.HTMLEscapeString(cs.age(t)) + `</small>`)
		},
	}
}

// age says how far t is from now, as the pages write it, and the command
// (internal/reltime; live.js counts it on in the browser with the same
// wording).
func (cs *Console) age(t time.Time) string {
	return reltime.Text(t, cs.dbNow())
}
