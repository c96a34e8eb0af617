package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/nswalk"
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
	Uncertain    []nsCount
	Reconciling  []nsCount
	ResultLost   []nsCount
	UncertainErr string
	// ReadAt is when the page was rendered: a page without a live view
	// says so, since what it shows goes stale.
	ReadAt time.Time
	// Schema is the client's schema; Elsewhere the other schemas with
	// uncertain executions (Options.Elsewhere), each with the command
	// that lists them; ElsewhereErr says why they could not be read.
	Schema       string
	Elsewhere    []schemaNote
	ElsewhereErr string
}

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
	if name != "message.html" { // a result of a POST: not to be reloaded
		p.ReadAt = cs.now()
	}
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
		p.UncertainErr = err.Error()
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
	p.Schema = cs.c.Config().Schema
	if cs.opts.Elsewhere != nil {
		schemas, err := cs.elsewhereNow(r)
		if err != nil {
			p.ElsewhereErr = err.Error()
		}
		for _, s := range schemas {
			p.Elsewhere = append(p.Elsewhere, schemaNote{Schema: s, Command: "sentinel list --uncertain --schema " + shell.Quote(s)})
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
	Exec    *execView
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

// execView is an execution as the pages show it.
type execView struct {
	sentinel.Execution
	Uncertain  bool
	HandedBack bool // claimed with no live lease: nothing runs it, the next caller does
	// RerunPending: executing, stopped with re-runs left (WithRerun,
	// Execution.Rerunnable): no operator is needed, the next caller with
	// WithRerun runs it again.
	RerunPending bool
	// ResultLost: completed, but fn's result was not stored
	// (ExecutionFilter.ResultLost): callers get ErrResult.
	ResultLost bool
	Link       string
	// Effect is the key's effect key (Execution.EffectKey), what fn got
	// from sentinel.EffectKey to pass to a provider that deduplicates.
	Effect string
}

func (cs *Console) view(e sentinel.Execution) execView {
	return execView{Execution: e, Uncertain: e.State == sentinel.StateExecuting && !e.LeaseAlive && !e.Rerunnable(),
		HandedBack: e.State == sentinel.StateClaimed && !e.LeaseAlive, RerunPending: e.Rerunnable(),
		ResultLost: e.State == sentinel.StateCompleted && e.ResultError != "" && e.FinalError == "",
		Link:       keyLink(e.Namespace, e.Key), Effect: e.EffectKey()}
}

func keyLink(ns, key string) string {
	return "key?" + url.Values{"ns": {ns}, "key": {key}}.Encode()
}

// tabs of the executions page: what the state filter accepts.
var tabs = []struct{ ID, Label string }{
	{"attention", "Needs an operator"},
	{"uncertain", "Uncertain"},
	{"reconciling", "Reconciling"},
	{"result-lost", "Result not stored"},
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
	type want struct {
		tab, heading, note string
		f                  sentinel.ExecutionFilter
	}
	var wants []want
	uncertain, reconciling, lost := base, base, base
	uncertain.Uncertain = true
	reconciling.State = sentinel.StateReconciling
	lost.ResultLost = true
	const lostNote = "Completed: fn succeeded, but its result could not be stored (Result error), so every caller gets ErrResult. Store the value callers should get: the key's page gives the set-result command."
	const uncNote = "Executing with an expired lease: the worker crashed, froze or failed after side effects may have happened. Sentinel will not run them again; reconcile each one."
	switch d.Tab {
	case "attention":
		wants = []want{{"uncertain", "Uncertain", uncNote, uncertain},
			{"reconciling", "Reconciling", "An operator started establishing the truth: force-complete (it happened) or reset to claimed (it did not).", reconciling},
			{"result-lost", "Result not stored", lostNote, lost}}
	case "uncertain":
		wants = []want{{d.Tab, "Uncertain", uncNote, uncertain}}
	case "result-lost":
		wants = []want{{d.Tab, "Result not stored", lostNote, lost}}
	case "reconciling", "executing", "claimed", "completed":
		f := base
		f.State = sentinel.State(d.Tab)
		wants = []want{{d.Tab, strings.ToUpper(d.Tab[:1]) + d.Tab[1:], "", f}}
	case "all":
		wants = []want{{d.Tab, "All executions", "", base}}
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
	liveAt := cs.liveURL(ctx, live) // before the rows are read
	status := http.StatusOK
	for _, wt := range wants {
		rows, next, err := cs.c.Executions(ctx, wt.f)
		if err != nil {
			d.Error, status = err.Error(), errStatus(err)
			if status == http.StatusInternalServerError {
				cs.opts.Logger.Error("console: list executions", "err", err)
			}
			break
		}
		s := section{Heading: wt.heading, Note: wt.note}
		for _, e := range rows {
			s.Rows = append(s.Rows, cs.view(e))
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
	cs.render(w, r, status, "executions.html", page{Nav: "executions", Live: liveAt, Data: d})
}

// liveURL is the live view's events URL for a page about to be read: it
// follows from the event history's head now, so a change made while the
// page is read, sent and its script connects is announced, not missed.
// Without the head (it could not be read) it follows from when it
// connects, as before.
func (cs *Console) liveURL(ctx context.Context, v url.Values) string {
	if head, err := cs.c.FollowHead(ctx); err == nil {
		v.Set("after", head)
	} else {
		cs.opts.Logger.Error("console: read the events' head", "err", err)
	}
	return "events?" + v.Encode()
}

// errStatus is the HTTP status of a failed read: bad input or a failure.
func errStatus(err error) int {
	if errors.Is(err, sentinel.ErrInvalid) {
		return http.StatusBadRequest
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

type keyData struct {
	Exec     execView
	Result   string // pretty JSON, or base64 when not JSON
	ResultJS bool
	History  []eventView // the newest keyHistoryShown events
	// HistoryCommand lists the whole history when older events are not
	// shown; empty when History is all of it.
	HistoryCommand string
	// SetResultCommand stores a result for a completed key whose callers
	// cannot get one (fn's result was not stored, or an operator's may not
	// decode): sentinel set-result, as the CLI's inspect prints it.
	// SetResultStored: the result is an operator's, not missing.
	SetResultCommand string
	SetResultStored  bool
	Evidence         []evidence
	Actions          []actionLink
	HTTP             *httpKey // the key is the idempotency middleware's
}

// keyHistoryShown is how many of a key's newest events its page shows: a
// key's history has no bound (a run per Retryable attempt, an event per
// caller turned away with Config.RecordRejections).
const keyHistoryShown = 200

// keyEvents reads what a key's page shows of its history: the newest
// keyHistoryShown events and one more when there are older ones (hist,
// oldest first), and, when those do not reach back to the key's newest
// claim (callers turned away since pushed it out), its last run
// (sentinel.Client.LastRun), which holds the completion_refused evidence
// of the run an operator resolves. Otherwise run is nil: hist holds that
// run already, and the page costs one statement.
func (cs *Console) keyEvents(ctx context.Context, ns, key string) (hist, run []sentinel.Event, err error) {
	hist, err = cs.c.History(ctx, key, sentinel.WithNamespace(ns), sentinel.WithLimit(keyHistoryShown+1))
	if err != nil || len(hist) <= keyHistoryShown {
		return hist, nil, err
	}
	for _, ev := range hist {
		if ev.Type == "claimed" {
			return hist, nil, nil
		}
	}
	run, err = cs.c.LastRun(ctx, key, sentinel.WithNamespace(ns))
	return hist, run, err
}

// historyCommand is the command that lists a key's whole history, runnable
// as printed where DATABASE_URL names the database (the command's default).
func historyCommand(schema, ns, key string) string {
	return keyCommand(schema, "history", ns, key)
}

// keyCommand is `sentinel VERB KEY -n NS [FLAGS] [--schema S]`, runnable as
// printed where DATABASE_URL names the database (the command's default); a
// key starting with "-" comes after "--".
func keyCommand(schema, verb, ns, key string, flags ...string) string {
	fl := " -n " + shell.Quote(ns)
	for _, f := range flags {
		fl += " " + shell.Quote(f)
	}
	if schema != "" && schema != "sentinel" {
		fl += " --schema " + shell.Quote(schema)
	}
	if strings.HasPrefix(key, "-") {
		return "sentinel " + verb + fl + " -- " + shell.Quote(key)
	}
	return "sentinel " + verb + " " + shell.Quote(key) + fl
}

// evidenceEvents returns the completion_refused events of the key's
// latest run, as keyEvents read it: run when it was read, else hist from
// its newest claim on (all of hist when it has none, as LastRun). A
// refused completion of an earlier run (reset since: an operator found
// its effect did not happen) is not evidence of the run being resolved
// now; it stays in the history.
func evidenceEvents(hist, run []sentinel.Event) []sentinel.Event {
	evs := run
	if evs == nil {
		evs = hist
		for i := len(hist) - 1; i >= 0; i-- {
			if hist[i].Type == "claimed" {
				evs = hist[i:]
				break
			}
		}
	}
	var out []sentinel.Event
	for _, ev := range evs {
		if ev.Type == "completion_refused" {
			out = append(out, ev)
		}
	}
	return out
}

type eventView struct {
	sentinel.Event
	Meta string // metadata as indented JSON
}

// evidence is a completion_refused event: fn returned, its completion was
// refused (lease lost, hard TTL). It carries fn's encoded result.
type evidence struct {
	ID     int64
	At     time.Time
	Token  int64
	Cause  string
	Result string // JSON text when the result was JSON
	Base64 string // otherwise, the bytes in base64
	Error  string // result_error / final_error, when recorded
	// Final: fn returned a Final outcome (final_error): callers were to
	// get its error, which no operator action stores, so its value is
	// never offered as the key's result.
	Final   bool
	UseLink string // confirm force-complete with this result; empty when not possible now
}

type actionLink struct {
	Label, Help, Link string
}

// readEvidence reads a completion_refused event's metadata: "result" is
// fn's encoded result as JSON (a string result is a JSON string, even one
// whose text reads as JSON: "null", "42"), "result_base64" bytes of
// another codec.
func readEvidence(ev sentinel.Event) evidence {
	e := evidence{ID: ev.ID, At: ev.At, Token: ev.Token}
	m := ev.Metadata
	if s, ok := m["cause"].(string); ok {
		e.Cause = s
	}
	if v, ok := m["result"]; ok {
		// Encoded back as it was stored (a JSON null included): a string
		// stays a string, never read again as the JSON its text may hold.
		if b, err := json.Marshal(v); err == nil {
			e.Result = string(b)
		}
	}
	if s, ok := m["result_base64"].(string); ok {
		e.Base64 = s
	}
	for _, k := range []string{"result_error", "final_error"} {
		if s, ok := m[k].(string); ok && s != "" {
			e.Error = k + ": " + s
			e.Final = k == "final_error"
		}
	}
	return e
}

func (cs *Console) keyPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns, key := q.Get("ns"), q.Get("key")
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	opts := []sentinel.Option{}
	if ns != "" {
		opts = append(opts, sentinel.WithNamespace(ns))
	}
	head, herr := cs.c.FollowHead(ctx) // before the key is read: see liveURL
	ex, err := cs.c.Inspect(ctx, key, opts...)
	switch {
	case errors.Is(err, sentinel.ErrInvalid):
		cs.fail(w, r, http.StatusBadRequest, "Bad key", err.Error(), "./")
		return
	case errors.Is(err, sentinel.ErrNotFound):
		cs.notHere(ctx, w, r, ns, key, err)
		return
	case err != nil:
		cs.opts.Logger.Error("console: inspect", "err", err)
		cs.fail(w, r, http.StatusInternalServerError, "Could not read the key", err.Error(), "./")
		return
	}
	hist, run, err := cs.keyEvents(ctx, ex.Namespace, key)
	if err != nil {
		cs.fail(w, r, http.StatusInternalServerError, "Could not read the history", err.Error(), "./")
		return
	}
	d := keyData{Exec: cs.view(*ex), HTTP: cs.readHTTPKey(ctx, ex)}
	if len(ex.Result) > 0 {
		d.Result, d.ResultJS = prettyResult(ex.Result)
	}
	if ex.State == sentinel.StateCompleted && ex.FinalError == "" && (ex.ResultError != "" || ex.ResultByOperator) && d.HTTP == nil {
		d.SetResultCommand = keyCommand(cs.c.Config().Schema, "set-result", ex.Namespace, key, "--token", strconv.FormatInt(ex.Token, 10))
		d.SetResultStored = ex.ResultError == ""
	}
	if len(hist) > keyHistoryShown {
		hist = hist[1:]
		d.HistoryCommand = historyCommand(cs.c.Config().Schema, ex.Namespace, key)
	}
	for _, ev := range hist {
		v := eventView{Event: ev}
		if len(ev.Metadata) > 0 {
			b, _ := json.MarshalIndent(ev.Metadata, "", "  ")
			v.Meta = string(b)
		}
		d.History = append(d.History, v)
	}
	for _, ev := range evidenceEvents(hist, run) {
		d.Evidence = append(d.Evidence, readEvidence(ev))
	}
	sort.Slice(d.Evidence, func(i, j int) bool { return d.Evidence[i].ID > d.Evidence[j].ID })
	if !cs.opts.ReadOnly {
		d.Actions = actionsFor(d.Exec, d.HTTP != nil)
		if ex.State == sentinel.StateReconciling && d.HTTP == nil {
			for i := range d.Evidence {
				if d.Evidence[i].Result != "" && !d.Evidence[i].Final {
					d.Evidence[i].UseLink = confirmLink("force_complete", ex.Namespace, ex.Key, ex.Token, url.Values{"evidence": {strconv.FormatInt(d.Evidence[i].ID, 10)}})
				}
			}
		}
	}
	live := url.Values{"ns": {ex.Namespace}, "key": {ex.Key}}
	if herr == nil {
		live.Set("after", head)
	} else {
		cs.opts.Logger.Error("console: read the events' head", "err", herr)
	}
	cs.render(w, r, http.StatusOK, "key.html", page{Nav: "executions", Live: "events?" + live.Encode(), Data: d})
}

// Bounds of the namespaces notHere looks in and links to.
const (
	elsewhereVisited = 1000 // namespaces probed, one index probe each
	elsewhereLinked  = 20   // namespaces linked to
)

// notHere is the key page of a key that is not in the namespace asked
// for (the client's when none was: a link or a URL typed without one):
// it links to the key in each namespace that has it, instead of saying
// only that there is no such execution. notFound is Inspect's error.
func (cs *Console) notHere(ctx context.Context, w http.ResponseWriter, r *http.Request, ns, key string, notFound error) {
	if ns == "" {
		ns = cs.c.Config().Namespace
	}
	found, capped, _, err := nswalk.Elsewhere(ctx, cs.c.Pool(), cs.c.Config().Schema, "executions", "key", key, ns, elsewhereVisited)
	if err != nil || len(found) == 0 {
		if err != nil {
			cs.opts.Logger.Error("console: look for a key in other namespaces", "key", key, "err", err)
		}
		cs.fail(w, r, http.StatusNotFound, "No such execution", notFound.Error(), "./")
		return
	}
	m := message{Heading: "Not in namespace " + strconv.Quote(ns), Kind: "error", Back: "./",
		Text: fmt.Sprintf("Key %q has no execution in namespace %q, but has one in %d other namespace(s):", key, ns, len(found))}
	if capped {
		m.Text = fmt.Sprintf("Key %q has no execution in namespace %q, but has one in %d other namespace(s) of the first %d (there are more namespaces):", key, ns, len(found), elsewhereVisited)
	}
	for i, other := range found {
		if i == elsewhereLinked {
			m.More = len(found) - elsewhereLinked
			break
		}
		m.Elsewhere = append(m.Elsewhere, nsLink{Namespace: other, Link: keyLink(other, key)})
	}
	cs.render(w, r, http.StatusNotFound, "message.html", page{Nav: "executions", Data: m})
}

func prettyResult(b []byte) (string, bool) {
	if json.Valid(b) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return out.String(), true
		}
	}
	return base64.StdEncoding.EncodeToString(b), false
}

// actions an operator can take, by state.
var actions = map[string]struct {
	Label, Verb, Help string
	From              sentinel.State
}{
	"reconcile":      {"Reconcile", "reconcile", "Take the key out of the worker's hands: it becomes reconciling with a new fencing token, so the old worker can no longer complete it. Then find out whether the side effect happened.", sentinel.StateExecuting},
	"force_complete": {"Force-complete", "force-complete", "The work did happen: store this value as the key's result. Every later Once caller gets it as a cached result; fn does not run again.", sentinel.StateReconciling},
	"resolve":        {"Resolve with a response", "resolve", "The request took effect: give the HTTP response the client's retries of this same request get (with Idempotent-Replayed: true). An uncertain key is reconciled first (a new fencing token), then completed with the response.", sentinel.StateReconciling},
	"reset":          {"Reset to claimed", "reset to claimed", "The work did not happen: the key becomes claimed with an expired lease, so the next Once caller runs fn again.", sentinel.StateReconciling},
}

// actionsFor lists the actions for e; an HTTP key (isHTTP) is resolved with
// a response rather than force-completed with a value.
func actionsFor(e execView, isHTTP bool) []actionLink {
	var out []actionLink
	if isHTTP && resolvable(e) {
		out = append(out, actionLink{actions["resolve"].Label, actions["resolve"].Help, confirmLink("resolve", e.Namespace, e.Key, e.Token, nil)})
	}
	complete := "force_complete"
	if isHTTP {
		complete = ""
	}
	switch {
	case e.Uncertain:
		out = append(out, actionLink{actions["reconcile"].Label, actions["reconcile"].Help, confirmLink("reconcile", e.Namespace, e.Key, e.Token, nil)})
	case e.State == sentinel.StateReconciling:
		for _, a := range []string{complete, "reset"} {
			if a == "" {
				continue
			}
			out = append(out, actionLink{actions[a].Label, actions[a].Help, confirmLink(a, e.Namespace, e.Key, e.Token, nil)})
		}
	}
	return out
}

func confirmLink(action, ns, key string, token int64, extra url.Values) string {
	v := url.Values{"action": {action}, "ns": {ns}, "key": {key}, "token": {strconv.FormatInt(token, 10)}}
	for k, vs := range extra {
		v[k] = vs
	}
	return "confirm?" + v.Encode()
}

type confirmData struct {
	Action, Label, Verb, Help string
	Exec                      execView
	Token                     int64
	CSRF                      string
	Value                     string
	FromEvidence              int64
	NeedsName                 bool
	Moved                     string // the key is no longer as the link said
	Error                     string
	HTTP                      *httpKey    // resolve: the HTTP key
	Resolve                   resolveForm // resolve: the form's values
	// ResultType is the type declared for the key (force-complete): the
	// value must match it.
	ResultType *sentinel.ResultType
	Shape      string // ResultType's expected shape
	SchemaText string // ResultType's schema, indented
	// ResetEvidence (reset): the key's last run returned success, its
	// completion refused: resetting runs fn again.
	ResetEvidence *evidence
}

// confirm is the confirmation step of an action: it shows the key as it is
// now and the form that does the action.
func (cs *Console) confirm(w http.ResponseWriter, r *http.Request) {
	if cs.opts.ReadOnly {
		cs.fail(w, r, http.StatusForbidden, "Read-only", "This console is read-only: no action is possible here.", "./")
		return
	}
	q := r.URL.Query()
	action, ns, key := q.Get("action"), q.Get("ns"), q.Get("key")
	a, ok := actions[action]
	if !ok {
		cs.fail(w, r, http.StatusBadRequest, "Unknown action", fmt.Sprintf("There is no action %q.", action), "./")
		return
	}
	token, err := strconv.ParseInt(q.Get("token"), 10, 64)
	if err != nil || token <= 0 {
		cs.fail(w, r, http.StatusBadRequest, "Bad request", "The link carries no valid fencing token; open the action from the key's page.", keyLink(ns, key))
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	ex, err := cs.c.Inspect(ctx, key, sentinel.WithNamespace(ns))
	if errors.Is(err, sentinel.ErrNotFound) {
		cs.notHere(ctx, w, r, ns, key, err) // links to the key where it is
		return
	}
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, sentinel.ErrInvalid) {
			status = http.StatusBadRequest
		}
		cs.fail(w, r, status, "Could not read the key", err.Error(), "./")
		return
	}
	d := confirmData{Action: action, Label: a.Label, Verb: a.Verb, Help: a.Help, Exec: cs.view(*ex), Token: token,
		CSRF: cs.csrfToken(cs.now(), action, ns, key, strconv.FormatInt(token, 10)), NeedsName: cs.opts.Operator == nil && cs.opts.OperatorToken != "",
		Value: q.Get("value")}
	switch {
	case action == "resolve":
		if d.HTTP = cs.readHTTPKey(ctx, ex); d.HTTP == nil {
			cs.fail(w, r, http.StatusBadRequest, "Not an HTTP key", "Only keys of the idempotency middleware are resolved with a response.", keyLink(ns, key))
			return
		}
		d.Resolve = d.HTTP.prefill()
		if ex.Token != token || !resolvable(d.Exec) {
			d.Moved = movedText(ex, token, a.From)
		}
	case ex.Token != token || ex.State != a.From || (action == "reconcile" && ex.LeaseAlive):
		d.Moved = movedText(ex, token, a.From)
	}
	if action == "force_complete" {
		rt, err := cs.c.ResultType(ctx, key, sentinel.WithNamespace(ns))
		switch {
		case err == nil:
			d.ResultType, d.Shape = rt, rt.Shape()
			var b bytes.Buffer
			if json.Indent(&b, rt.Schema, "", "  ") == nil {
				d.SchemaText = b.String()
			}
		case !errors.Is(err, sentinel.ErrNotFound):
			cs.opts.Logger.Error("console: read a result type", "namespace", ns, "key", key, "err", err)
		}
		if d.ResultType != nil && d.Value != "" {
			// A value sent back to the form: say at once what is wrong.
			var te *sentinel.ResultTypeError
			if errors.As(d.ResultType.Check(key, []byte(d.Value)), &te) {
				d.Error = "This value does not match the result type: at " + te.Path + ": " + te.Reason + "."
			}
		}
	}
	if action == "reset" {
		// Reset runs fn again: say so when this run's fn returned success.
		if hist, run, err := cs.keyEvents(ctx, ns, key); err == nil {
			for _, ev := range evidenceEvents(hist, run) {
				if e := readEvidence(ev); !e.Final && (e.Result != "" || e.Base64 != "") {
					d.ResetEvidence = &e
				}
			}
		}
	}
	if evID := q.Get("evidence"); evID != "" && action == "force_complete" {
		id, _ := strconv.ParseInt(evID, 10, 64)
		hist, run, err := cs.keyEvents(ctx, ns, key)
		if err == nil {
			for _, ev := range evidenceEvents(hist, run) {
				if ev.ID == id {
					if e := readEvidence(ev); e.Result != "" && !e.Final {
						d.Value, d.FromEvidence = e.Result, id
					} else if e.Final {
						d.FromEvidence = -1
					}
				}
			}
		}
		switch d.FromEvidence {
		case 0:
			d.Error = "That completion_refused event holds no JSON result; type the value."
		case -1:
			d.FromEvidence = 0
			d.Error = "That completion_refused event is a Final outcome: fn returned an error every caller was to get, and no operator action stores one. " +
				"A value stored here reaches every caller as a success; to run the work again, reset the key instead."
		}
	}
	cs.render(w, r, http.StatusOK, "confirm.html", page{Nav: "executions", Data: d})
}

func movedText(ex *sentinel.Execution, token int64, from sentinel.State) string {
	switch {
	case ex.Token != token:
		return fmt.Sprintf("The key moved on: you saw fencing token %d, it is now at token %d (state %s). The action would be refused; go back to the key's page and look again.", token, ex.Token, ex.State)
	case ex.State != from:
		return fmt.Sprintf("The key is %s, not %s: the action would be refused.", ex.State, from)
	default:
		return "The worker's lease is alive again: the key is not uncertain. The action would be refused."
	}
}

// maxName is the longest operator name, in characters, an action records
// (the form's maxlength).
const maxName = 200

// maxReason is the longest reason, in characters, an action records (the
// form's maxlength).
const maxReason = 2000

// act does a confirmed action.
func (cs *Console) act(w http.ResponseWriter, r *http.Request) {
	if cs.opts.ReadOnly {
		cs.fail(w, r, http.StatusForbidden, "Read-only", "This console is read-only: no action is possible here.", "./")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		cs.fail(w, r, http.StatusBadRequest, "Bad request", "The form could not be read: "+err.Error(), "./")
		return
	}
	f := r.PostForm
	action, ns, key, tokStr := f.Get("action"), f.Get("ns"), f.Get("key"), f.Get("token")
	back := keyLink(ns, key)
	if !sameOrigin(r) {
		cs.fail(w, r, http.StatusForbidden, "Refused", "The request came from another site.", back)
		return
	}
	if err := cs.checkCSRF(f.Get("csrf"), action, ns, key, tokStr); err != nil {
		cs.fail(w, r, http.StatusForbidden, "Refused", err.Error(), back)
		return
	}
	name, auth, ok := cs.actor(r, f.Get("operator_token"), f.Get("operator"))
	if !ok {
		cs.fail(w, r, http.StatusForbidden, "Refused", "The operator token is missing or wrong. Nothing was changed.", back)
		return
	}
	a, ok := actions[action]
	token, err := strconv.ParseInt(tokStr, 10, 64)
	if !ok || err != nil || token <= 0 {
		cs.fail(w, r, http.StatusBadRequest, "Bad request", "Unknown action or token.", back)
		return
	}
	if name == "" && auth == authApp {
		// No field of the form can give it: the application names operators.
		cs.fail(w, r, http.StatusBadRequest, "Refused: who you are is not known",
			"This console names operators from the request (its Operator function), and it gave no name for yours: the header or session it reads may be missing (a proxy that did not pass it?). Nothing was changed.", back)
		return
	}
	// The form's maxlength counts characters: so does this.
	if name == "" || utf8.RuneCountInString(name) > maxName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		cs.fail(w, r, http.StatusBadRequest, "Your name is needed", fmt.Sprintf("Give your name (up to %d characters): it is recorded in the key's history with the action. Nothing was changed.", maxName), back)
		return
	}
	meta := map[string]any{"operator_name": name, "operator_auth": auth, "via": "console"}
	if reason := strings.TrimSpace(f.Get("reason")); reason != "" {
		// The form's maxlength: refused beyond it, never cut (a cut by
		// bytes lost half of a reason in Cyrillic, inside a character).
		if utf8.RuneCountInString(reason) > maxReason {
			cs.fail(w, r, http.StatusBadRequest, "Reason too long", fmt.Sprintf("The reason is longer than %d characters: shorten it. Nothing was changed.", maxReason), back)
			return
		}
		meta["reason"] = reason
	}
	if ev := f.Get("evidence"); ev != "" {
		meta["from_event"] = ev
	}
	opts := []sentinel.Option{sentinel.WithNamespace(ns), sentinel.WithToken(token), sentinel.WithMetadata(meta)}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	switch action {
	case "reconcile":
		_, err = cs.c.Reconcile(ctx, key, opts...)
	case "reset":
		err = cs.c.ResetToClaimed(ctx, key, opts...)
	case "force_complete":
		value := strings.TrimSpace(f.Get("value"))
		if !json.Valid([]byte(value)) {
			cs.fail(w, r, http.StatusBadRequest, "Not JSON", "The value must be valid JSON (for text, put it in double quotes). Nothing was changed.", back)
			return
		}
		err = cs.c.ForceComplete(ctx, key, json.RawMessage(value), opts...)
	case "resolve":
		scope, ckey, ok := idempotency.ParseExecutionKey(key)
		if !ok {
			cs.fail(w, r, http.StatusBadRequest, "Not an HTTP key", "Only keys of the idempotency middleware are resolved with a response. Nothing was changed.", back)
			return
		}
		rec, ierr := idempotency.Inspect(ctx, cs.c, scope, ckey, sentinel.WithNamespace(ns))
		if ierr != nil {
			err = ierr
			break
		}
		resp, perr := parseResolve(f, rec.Request.Fingerprint)
		if perr != nil {
			cs.fail(w, r, http.StatusBadRequest, "Bad response", perr.Error()+". Nothing was changed.", back)
			return
		}
		var done int64
		if done, err = idempotency.Resolve(ctx, cs.c, scope, ckey, resp, opts...); err == nil {
			token = done
		}
	}
	ex, rerr := cs.c.Inspect(ctx, key, sentinel.WithNamespace(ns))
	var ev *execView
	if rerr == nil {
		v := cs.view(*ex)
		ev = &v
	}
	var ee *sentinel.ExecutionError
	var te *sentinel.ResultTypeError
	switch {
	case errors.As(err, &te):
		// Back to the form, the value as typed, the error beside it.
		again := confirmLink(action, ns, key, token, url.Values{"value": {strings.TrimSpace(f.Get("value"))}})
		text := fmt.Sprintf("Refused, nothing was changed: the value does not match the result type %s declared for keys starting with %q: at %s: %s.",
			te.Type, te.Prefix, te.Path, te.Reason)
		cs.render(w, r, http.StatusUnprocessableEntity, "message.html", page{Nav: "executions", Data: message{Kind: "refused",
			Heading: a.Label + ": refused", Text: text, Back: again, Exec: ev}})
	case err == nil:
		cs.opts.Logger.Info("console: action done", "action", action, "namespace", ns, "key", key, "token", token, "operator", name)
		cs.render(w, r, http.StatusOK, "message.html", page{Nav: "executions", Data: message{Kind: "ok", Heading: a.Label + ": done",
			Text: fmt.Sprintf("%s %q (namespace %q) at token %d; recorded in its history as done by %s.", a.Label, key, ns, token, name), Back: back, Exec: ev}})
	case errors.As(err, &ee) && errors.Is(err, sentinel.ErrWrongState):
		text := "Refused, nothing was changed: " + err.Error() + "."
		if ee.Token != token {
			text = fmt.Sprintf("Refused, nothing was changed: the key moved on. You saw fencing token %d; it is now at token %d in state %s (owner %s). Look at the key again before acting.", token, ee.Token, ee.State, ee.Owner)
		}
		cs.render(w, r, http.StatusConflict, "message.html", page{Nav: "executions", Data: message{Kind: "refused", Heading: a.Label + ": refused", Text: text, Back: back, Exec: ev}})
	case errors.Is(err, sentinel.ErrNotFound):
		cs.fail(w, r, http.StatusNotFound, "No such execution", err.Error(), "./")
	case errors.Is(err, sentinel.ErrInvalid):
		if _, _, isHTTP := idempotency.ParseExecutionKey(key); isHTTP && action == "force_complete" {
			// Its value is an HTTP response: back to the form that asks for one.
			back = confirmLink("resolve", ns, key, token, nil)
		}
		cs.fail(w, r, http.StatusBadRequest, "Refused", err.Error()+". Nothing was changed.", back)
	default:
		cs.opts.Logger.Error("console: action", "action", action, "namespace", ns, "key", key, "err", err)
		cs.fail(w, r, http.StatusInternalServerError, "Failed", err.Error(), back)
	}
}

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
	// The stream starts once Follow holds its position: a cursor (or
	// filter) Follow refuses gets 400 instead of a stream.
	started := false
	f.OnStart = func() {
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(w, ": sentinel live events\nretry: 2000\n\n")
		fl.Flush()
	}
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
	}
	err := cs.c.Follow(r.Context(), f, func(ev sentinel.Event) error {
		b, err := json.Marshal(wire{ev.ID, ev.Namespace, ev.Key, ev.Type, string(ev.State), ev.Token, ev.Owner,
			ev.At.UTC().Format(time.RFC3339Nano), keyLink(ev.Namespace, ev.Key)})
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %s\nevent: execution\ndata: %s\n\n", ev.Cursor, b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started && errors.Is(err, sentinel.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case !started:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		_, _ = fmt.Fprintf(w, "event: failure\ndata: %q\n\n", err.Error())
		fl.Flush()
	}
}

func (cs *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"inc": func(i int) int { return i + 1 },
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"age": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			d := cs.now().Sub(t)
			suffix := " ago"
			if d < 0 {
				d, suffix = -d, " from now"
			}
			switch {
			case d < time.Second:
				return "just now"
			case d < time.Minute:
				return fmt.Sprintf("%ds%s", int(d.Seconds()), suffix)
			case d < time.Hour:
				return fmt.Sprintf("%dm%02ds%s", int(d.Minutes()), int(d.Seconds())%60, suffix)
			case d < 48*time.Hour:
				return fmt.Sprintf("%dh%02dm%s", int(d.Hours()), int(d.Minutes())%60, suffix)
			}
			return fmt.Sprintf("%dd%s", int(d.Hours()/24), suffix)
		},
	}
}
