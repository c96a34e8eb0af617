package console

// This file: A key's page: its facts, its history and the evidence of a refused completion, and a key looked for in other namespaces (notHere).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/nswalk"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
	"github.com/sentinel-coordination/sentinel/internal/shell"
)

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
	// Next is what a read-only console offers instead of Actions: the
	// commands sentinel inspect prints for the key's state, runnable as
	// printed (nextCommands).
	Next []nextCommand
	HTTP *httpKey // the key is the idempotency middleware's
	// TakenFrom is the worker an operator's reconcile took the key from,
	// while the row (Owner, Host) names the operator: where the stopped
	// attempt ran, from the last run's reconciling event. Nil when the
	// last run has none.
	TakenFrom *takenFrom
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

// thresholdFlags are the flags a printed sentinel command (inspect,
// idempotency inspect) carries so that it judges a key by the console's
// thresholds, not its own defaults: --rerun-pending-after
// (Options.RerunPendingAfter) and --reconciling-after
// (Options.ReconcilingAfter), each as typed (10m, 1h30m) and only when
// not the default, as sentinel status prints them.
func (cs *Console) thresholdFlags() []string {
	var fl []string
	if cs.opts.RerunPendingAfter != DefaultRerunPendingAfter {
		fl = append(fl, "--rerun-pending-after", reltime.Duration(cs.opts.RerunPendingAfter))
	}
	if cs.opts.ReconcilingAfter != DefaultReconcilingAfter {
		fl = append(fl, "--reconciling-after", reltime.Duration(cs.opts.ReconcilingAfter))
	}
	return fl
}

// nextCommand is a step a read-only console's key page prints: what to
// do (Text) and the command line that does it.
type nextCommand struct {
	Text, Command string
}

// nextCommands is what to do next with the key of d on the command line,
// as sentinel inspect prints it (its nextSteps), for a read-only console,
// which offers no action: reconcile an uncertain key (or one rerun
// pending too long), force-complete or reset a reconciling one, see an
// HTTP key's request with sentinel idempotency inspect. Each command runs
// as printed (keyCommand) where DATABASE_URL names the database.
func (cs *Console) nextCommands(d keyData) []nextCommand {
	e := d.Exec
	if !e.Uncertain && !e.RerunStale && e.State != sentinel.StateReconciling {
		return nil
	}
	schema := cs.c.Config().Schema
	if d.HTTP != nil {
		// The thresholds as typed (10m), after the key's flags and before
		// --schema, as sentinel status and inspect print the command: it
		// then judges the key as this page does.
		cmd := idempotency.Command("inspect", d.HTTP.Key, d.HTTP.Scope, e.Namespace, schema)
		after := ""
		for _, f := range cs.thresholdFlags() {
			after += " " + shell.Quote(f)
		}
		if after != "" {
			if strings.HasPrefix(d.HTTP.Key, "-") {
				// idempotency.Command puts "-- KEY" last: the flag goes before it.
				cmd = idempotency.Command("inspect"+after, d.HTTP.Key, d.HTTP.Scope, e.Namespace, schema)
			} else {
				cmd = idempotency.Command("inspect", d.HTTP.Key, d.HTTP.Scope, e.Namespace, "") + after
				if schema != "" && schema != "sentinel" {
					cmd += " --schema " + shell.Quote(schema)
				}
			}
		}
		return []nextCommand{{"This is an HTTP Idempotency-Key: see its request and resolve it with a response", cmd}}
	}
	tok := strconv.FormatInt(e.Token, 10)
	cmd := func(verb string) string { return keyCommand(schema, verb, e.Namespace, e.Key, "--token", tok) }
	var refused *evidence // the newest refused completion, as inspect reads it
	if len(d.Evidence) > 0 {
		refused = &d.Evidence[0]
	}
	final := refused != nil && refused.Final
	switch {
	case e.State == sentinel.StateReconciling && final:
		return []nextCommand{
			{"fn returned a Final outcome, which no operator command stores: force-complete stores a value every caller gets as a success. If callers should get a value, store it (it asks for the value)", cmd("force-complete")},
			{"If the next caller should run fn again (it decides anew)", cmd("reset")},
		}
	case e.State == sentinel.StateReconciling:
		how := "store its result (it asks for the value)"
		if refused != nil && refused.Result != "" {
			how = "store fn's result, shown above under Refused completions (it asks for the value)"
		}
		return []nextCommand{
			{"If the work happened, " + how, cmd("force-complete")},
			{"If it did not, let the next caller run it", cmd("reset")},
		}
	case final:
		return []nextCommand{{"fn returned a Final outcome, which no operator command stores; reconcile, then decide what callers get", cmd("reconcile")}}
	case e.Uncertain && refused != nil:
		return []nextCommand{{"The work happened (fn returned); reconcile, then force-complete with fn's result", cmd("reconcile")}}
	case e.Uncertain:
		return []nextCommand{{"Find out whether the work happened, then reconcile", cmd("reconcile")}}
	default: // RerunStale
		return []nextCommand{{fmt.Sprintf("No caller with WithRerun came back to run attempt %d of %d; if none will, find out whether the work happened, then reconcile (no caller re-runs it after that)",
			e.Attempt+1, e.MaxAttempts), cmd("reconcile")}}
	}
}

// takenFrom is the worker a reconcile took a key from, as its
// reconciling event records it (Event.PreviousHolder).
type takenFrom struct {
	Owner, Host string
	PID         int
	Token       int64
	At          time.Time // when it was reconciled
	// By is who reconciled it: the operator the history names
	// (operator_name: the console's form or token, the CLI's --operator),
	// else the reconciling process's owner.
	By string
	// Through is the reconciling process's owner when By is the operator
	// named apart from it (the console's process, for an action taken on
	// the console); empty otherwise.
	Through string
}

// readTakenFrom returns the worker the latest run's reconcile took the key
// from (hist and run as keyEvents read them), or nil: no reconcile in
// that run, or one recorded before reconcile recorded the worker.
func readTakenFrom(hist, run []sentinel.Event) *takenFrom {
	evs := run
	if evs == nil {
		evs = hist
	}
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Type == "claimed" {
			return nil // a later run than any reconcile before it
		}
		if ev.Type != "reconciling" {
			continue
		}
		p, ok := ev.PreviousHolder()
		if !ok {
			return nil
		}
		t := &takenFrom{Owner: p.Owner, Host: p.Host, PID: p.PID, Token: p.Token, At: ev.At, By: ev.Owner}
		if name, _ := ev.Metadata["operator_name"].(string); name != "" && name != ev.Owner {
			t.By, t.Through = name, ev.Owner
		}
		return t
	}
	return nil
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
	head := cs.liveHead(ctx) // before the key is read: see liveURL
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
		cs.failRead(w, r, http.StatusInternalServerError, "Could not read the key", err, "./")
		return
	}
	hist, run, err := cs.keyEvents(ctx, ex.Namespace, key)
	if err != nil {
		cs.failRead(w, r, http.StatusInternalServerError, "Could not read the history", err, "./")
		return
	}
	cs.measureDBClock(r) // whether a key rerun pending needs an operator: on the database clock
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
	d.TakenFrom = readTakenFrom(hist, run)
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
	if cs.opts.ReadOnly {
		d.Next = cs.nextCommands(d)
	}
	live := url.Values{"ns": {ex.Namespace}, "key": {ex.Key}}
	cs.render(w, r, http.StatusOK, "key.html", page{Nav: "executions", Live: cs.liveURL(ctx, live, head), Data: d})
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
