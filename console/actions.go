package console

// This file: An operator's actions on a key: which apply in which state, their confirmation step (confirm) and the guarded action (act).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// actions an operator can take, by state.
var actions = map[string]struct {
	Label, Verb, Help string
	From              sentinel.State
}{
	"reconcile":      {"Reconcile", "reconcile", "Take the key out of the worker's hands: it becomes reconciling with a new fencing token, so the old worker can no longer complete it. Then find out whether the side effect happened.", sentinel.StateExecuting},
	"force_complete": {"Force-complete", "force-complete", "The work did happen: store this value as the key's result. Every later Once caller gets it as a cached result; fn does not run again.", sentinel.StateReconciling},
	"resolve":        {"Resolve with a response", "resolve", "The request took effect: give the HTTP response the client's retries of this same request get (with Idempotent-Replayed: true). An uncertain key (or one rerun pending too long) is reconciled first (a new fencing token), then completed with the response.", sentinel.StateReconciling},
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
	case e.Uncertain || e.RerunStale: // a re-run nobody came back for: as sentinel inspect says
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

// keptFields are the fields of a refused action's form f that the form,
// shown again in the refusal's answer (act's again), keeps as typed:
// force-complete's value, resolve's response, the reason and the
// operator's name. Never the operator token (a secret) nor the CSRF token
// (issued anew); nor a name or reason that holds an operator token
// (pasted into the wrong field), which the page must not show.
func (cs *Console) keptFields(action string, f url.Values) url.Values {
	keep := url.Values{}
	if v := strings.TrimSpace(f.Get("value")); action == "force_complete" && v != "" {
		keep.Set("value", v)
	}
	if action == "resolve" {
		for _, k := range []string{"status", "headers", "body"} {
			if f.Has(k) {
				keep.Set(k, f.Get(k))
			}
		}
	}
	for _, k := range []string{"reason", "operator"} {
		if v := f.Get(k); v != "" && !cs.holdsToken(v) {
			keep.Set(k, v)
		}
	}
	return keep
}

type confirmData struct {
	Action, Label, Verb, Help string
	Exec                      execView
	Token                     int64
	CSRF                      string
	Value                     string
	FromEvidence              int64
	NeedsName                 bool
	// OwnTokens: NeedsName, and Operators gives operators tokens of their
	// own too, which name them: the name is asked of the shared token's
	// users only, not required.
	OwnTokens bool
	Moved     string // the key is no longer as the link said
	Error     string
	HTTP      *httpKey    // resolve: the HTTP key
	Resolve   resolveForm // resolve: the form's values
	// Reason and Name are the reason and operator's name typed in a
	// refused form, shown again.
	Reason, Name string
	// Refused is why the form, sent, was refused (act's again): the form
	// is shown again below it, what was typed kept.
	Refused *refusal
	// ResultType is the type declared for the key (force-complete): the
	// value must match it.
	ResultType *sentinel.ResultType
	Shape      string // ResultType's expected shape
	SchemaText string // ResultType's schema, indented
	// ResetEvidence (reset): the key's last run returned success, its
	// completion refused: resetting runs fn again.
	ResetEvidence *evidence
}

// refusal is why a sent form was refused (Why), and what to do with the
// form shown again below it (ToDo).
type refusal struct{ Heading, Why, ToDo string }

// Text is what the page says above the form shown again.
func (r refusal) Text() string { return strings.TrimSpace(r.Why + " " + r.ToDo) }

// confirm is the confirmation step of an action: it shows the key as it is
// now and the form that does the action. What an operator types is never
// read from the link: it travels only in the form's POST body (a refused
// form comes back in the answer to that POST: act's again), never in a URL,
// where browser history, access logs and proxies would keep it.
func (cs *Console) confirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	action, ns, key := q.Get("action"), q.Get("ns"), q.Get("key")
	if cs.opts.ReadOnly {
		cs.readOnly(w, r, ns, key)
		return
	}
	if _, ok := actions[action]; !ok {
		cs.fail(w, r, http.StatusBadRequest, "Unknown action", fmt.Sprintf("There is no action %q.", action), "./")
		return
	}
	token, err := strconv.ParseInt(q.Get("token"), 10, 64)
	if err != nil || token <= 0 {
		cs.fail(w, r, http.StatusBadRequest, "Bad request", "The link carries no valid fencing token; open the action from the key's page.", keyLink(ns, key))
		return
	}
	cs.showConfirm(w, r, http.StatusOK, action, ns, key, token, q.Get("evidence"), nil, nil)
}

// showConfirm renders the confirmation form of action on key at the
// fencing token the operator saw, with status: the key read now, a fresh
// CSRF token, the fields in typed (keptFields) as typed, and why the form
// was refused when refused is set. evidenceID is the completion_refused
// event whose value force-complete proposes.
func (cs *Console) showConfirm(w http.ResponseWriter, r *http.Request, status int, action, ns, key string, token int64, evidenceID string, typed url.Values, refused *refusal) {
	a := actions[action]
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	ex, err := cs.c.Inspect(ctx, key, sentinel.WithNamespace(ns))
	if err != nil && refused != nil {
		// No form to show again: the refusal, and that what was typed
		// is not kept.
		cs.fail(w, r, status, refused.Heading, refused.Why+" The key could not be read again to show the form with what you typed ("+err.Error()+"): open the action again from the key's page.", keyLink(ns, key))
		return
	}
	if errors.Is(err, sentinel.ErrNotFound) {
		cs.notHere(ctx, w, r, ns, key, err) // links to the key where it is
		return
	}
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, sentinel.ErrInvalid) {
			status = http.StatusBadRequest
		}
		cs.failRead(w, r, status, "Could not read the key", err, "./")
		return
	}
	d := confirmData{Action: action, Label: a.Label, Verb: a.Verb, Help: a.Help, Exec: cs.view(*ex), Token: token,
		CSRF: cs.csrfToken(cs.now(), action, ns, key, strconv.FormatInt(token, 10)), NeedsName: cs.opts.Operator == nil && cs.opts.OperatorToken != "", OwnTokens: len(cs.opts.Operators) > 0,
		Value: typed.Get("value"), Reason: typed.Get("reason"), Name: typed.Get("operator"), Refused: refused}
	switch {
	case action == "resolve":
		if d.HTTP = cs.readHTTPKey(ctx, ex); d.HTTP == nil {
			cs.fail(w, r, http.StatusBadRequest, "Not an HTTP key", "Only keys of the idempotency middleware are resolved with a response.", keyLink(ns, key))
			return
		}
		d.Resolve = d.HTTP.prefill()
		if typed.Has("status") || typed.Has("headers") || typed.Has("body") {
			// A refused form's response, as typed.
			d.Resolve = resolveForm{Status: typed.Get("status"), Headers: typed.Get("headers"), Body: typed.Get("body")}
		}
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
		if problem := notJSON(d.Value); d.Value != "" && problem != "" {
			d.Error = problem
		} else if d.ResultType != nil && d.Value != "" {
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
	if evidenceID != "" && action == "force_complete" && d.Value == "" {
		id, _ := strconv.ParseInt(evidenceID, 10, 64)
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
	} else if evidenceID != "" && action == "force_complete" {
		// A refused form's value, proposed from that event: the form
		// sent again still records it (from_event).
		d.FromEvidence, _ = strconv.ParseInt(evidenceID, 10, 64)
	}
	if refused != nil && d.Error != "" && strings.Contains(refused.Why, d.Error) {
		d.Error = "" // the refusal says it already
	}
	cs.render(w, r, status, "confirm.html", page{Nav: "executions", Data: d})
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

// readOnly refuses an action on a read-only console, and says where to
// act instead: the command line (sentinel inspect prints the commands for
// the key's state; with the console's thresholds when they are not the
// defaults, thresholdFlags, so that it judges the key as the console did)
// or a console with an operator token.
func (cs *Console) readOnly(w http.ResponseWriter, r *http.Request, ns, key string) {
	text := "This console is read-only: it offers and accepts no action. Nothing was changed. To act, use a console started with an operator token, or the command line"
	if key != "" {
		if ns == "" {
			ns = cs.c.Config().Namespace
		}
		text += ": " + keyCommand(cs.c.Config().Schema, "inspect", ns, key, cs.thresholdFlags()...) + " prints the commands for the key's state"
	}
	cs.fail(w, r, http.StatusForbidden, "Read-only", text+".", "./")
}

// maxName is the longest operator name, in characters, an action records
// (the form's maxlength).
const maxName = 200

// maxReason is the longest reason, in characters, an action records (the
// form's maxlength).
const maxReason = 2000

// act does a confirmed action.
func (cs *Console) act(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		cs.fail(w, r, http.StatusBadRequest, "Bad request", "The form could not be read: "+err.Error()+". Nothing was changed: go back to the key's page and open the action again.", "./")
		return
	}
	f := r.PostForm
	action, ns, key, tokStr := f.Get("action"), f.Get("ns"), f.Get("key"), f.Get("token")
	if cs.opts.ReadOnly {
		cs.readOnly(w, r, ns, key)
		return
	}
	back := keyLink(ns, key)
	// again answers a refusal of what was typed (the operator token, the
	// name, the reason, the value or response) or of the form's age with
	// the form again, freshly issued, the key as it is now, what was typed
	// kept (keptFields: never the operator token) and why it was refused
	// above it: in this POST's answer, never in a link, so that nothing
	// typed lands in a URL (browser history, access logs). Without a
	// valid action and token it is a plain refusal leading to the key.
	again := func(status int, heading, why, todo string) {
		cs.fail(w, r, status, heading, why+" Go back to the key's page and open the action again.", back)
	}
	if t, err := strconv.ParseInt(tokStr, 10, 64); err == nil && t > 0 {
		if a, ok := actions[action]; ok {
			again = func(status int, heading, why, todo string) {
				if heading == "" {
					heading = a.Label + ": refused"
				}
				cs.showConfirm(w, r, status, action, ns, key, t, f.Get("evidence"), cs.keptFields(action, f), &refusal{Heading: heading, Why: why, ToDo: todo})
			}
		}
	}
	if !sameOrigin(r) {
		cs.fail(w, r, http.StatusForbidden, "Refused", "The request came from another site, not from this console's own page. Nothing was changed. If you meant to act, open the key on this console (← Back) and confirm there.", back)
		return
	}
	if err := cs.checkCSRF(f.Get("csrf"), action, ns, key, tokStr); err != nil {
		again(http.StatusForbidden, "Refused", "The form is not valid (expired, or not issued by this console). Nothing was changed.",
			"The form below is issued afresh, with the key as it is now and what you typed kept: check it and confirm again.")
		return
	}
	name, auth, ok := cs.actor(r, f.Get("operator_token"), f.Get("operator"))
	if !ok {
		again(http.StatusForbidden, "Refused", "The operator token is missing or wrong. Nothing was changed.",
			"What you typed is kept in the form below: give the token again and confirm.")
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
		again(http.StatusBadRequest, "Your name is needed", fmt.Sprintf("Give your name (up to %d characters): it is recorded in the key's history with the action. Nothing was changed.", maxName),
			"Give it in the form below and confirm again.")
		return
	}
	if cs.holdsToken(f.Get("operator")) || cs.holdsToken(f.Get("reason")) {
		// Recorded, it would be in the key's history for every reader.
		again(http.StatusBadRequest, "Refused: an operator token in the form's text",
			"The name or the reason you typed holds an operator token (pasted into the wrong field?): it is not recorded, and not shown again. Nothing was changed.",
			"That field is emptied in the form below: type it again, the token only in the operator token field, and confirm.")
		return
	}
	meta := map[string]any{"operator_name": name, "operator_auth": auth, "via": "console"}
	if reason := strings.TrimSpace(f.Get("reason")); reason != "" {
		// The form's maxlength: refused beyond it, never cut (a cut by
		// bytes lost half of a reason in Cyrillic, inside a character).
		if utf8.RuneCountInString(reason) > maxReason {
			again(http.StatusBadRequest, "Reason too long", fmt.Sprintf("The reason is longer than %d characters. Nothing was changed.", maxReason),
				"Shorten it in the form below and confirm again.")
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
	var reconciled *sentinel.Execution
	switch action {
	case "reconcile":
		reconciled, err = cs.c.Reconcile(ctx, key, opts...)
	case "reset":
		err = cs.c.ResetToClaimed(ctx, key, opts...)
	case "force_complete":
		value := strings.TrimSpace(f.Get("value"))
		if problem := notJSON(value); problem != "" {
			// The form again, the value as typed, where it is wrong.
			again(http.StatusBadRequest, "", problem+" Nothing was changed.", "")
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
			again(http.StatusBadRequest, "Bad response", perr.Error()+". Nothing was changed.",
				"What you typed is kept in the form below: correct it and confirm again.")
			return
		}
		var done int64
		if done, err = idempotency.Resolve(ctx, cs.c, scope, ckey, resp, opts...); err == nil {
			token = done
		}
	}
	var te *sentinel.ResultTypeError
	if errors.As(err, &te) {
		// The form again, the value as typed, the error beside it.
		again(http.StatusUnprocessableEntity, "", fmt.Sprintf("Refused, nothing was changed: the value does not match the result type %s declared for keys starting with %q: at %s: %s.",
			te.Type, te.Prefix, te.Path, te.Reason), "Correct the value in the form below and confirm again.")
		return
	}
	if errors.Is(err, sentinel.ErrInvalid) && action == "force_complete" {
		if _, _, isHTTP := idempotency.ParseExecutionKey(key); !isHTTP {
			// A value JSON does not carry (1e999): the form again with it.
			again(http.StatusBadRequest, "Refused", err.Error()+". Nothing was changed.", "Correct the value in the form below and confirm again.")
			return
		}
	}
	ex, rerr := cs.c.Inspect(ctx, key, sentinel.WithNamespace(ns))
	var ev *execView
	if rerr == nil {
		v := cs.view(*ex)
		ev = &v
	}
	var ee *sentinel.ExecutionError
	switch {
	case err == nil:
		cs.opts.Logger.Info("console: action done", "action", action, "namespace", ns, "key", key, "token", token, "operator", name)
		cs.render(w, r, http.StatusOK, "message.html", page{Nav: "executions", Data: message{Kind: "ok", Heading: a.Label + ": done",
			Text: doneText(action, a.Label, ns, key, token, name, reconciled), Back: back, Exec: ev}})
	case errors.As(err, &ee) && errors.Is(err, sentinel.ErrWrongState):
		text := "Refused, nothing was changed: " + err.Error() + "."
		if ee.Token != token {
			text = fmt.Sprintf("Refused, nothing was changed: the key moved on. You saw fencing token %d; it is now at token %d in state %s (owner %s). Look at the key again before acting.", token, ee.Token, ee.State, ee.Owner)
		}
		cs.render(w, r, http.StatusConflict, "message.html", page{Nav: "executions", Data: message{Kind: "refused", Heading: a.Label + ": refused", Text: text, Back: back, Exec: ev}})
	case errors.Is(err, sentinel.ErrNotFound):
		cs.fail(w, r, http.StatusNotFound, "No such execution", fmt.Sprintf("Key %q has no execution any more in namespace %q (deleted or pruned since you opened the form): %s. Nothing was changed: look for it in the executions list.", key, ns, err), "./")
	case errors.Is(err, sentinel.ErrInvalid):
		if _, _, isHTTP := idempotency.ParseExecutionKey(key); isHTTP && action == "force_complete" {
			// Its value is an HTTP response: back to the form that asks for one.
			back = confirmLink("resolve", ns, key, token, nil)
		}
		cs.fail(w, r, http.StatusBadRequest, "Refused", err.Error()+". Nothing was changed.", back)
	default:
		// The database failed or could not be reached: the action may have
		// been done (a reply lost) or not. Say so, and what to do.
		cs.opts.Logger.Error("console: action", "action", action, "namespace", ns, "key", key, "err", err)
		text := fmt.Sprintf("%s failed: %s. The action may or may not have been done. "+
			"When the database answers again, open the key's page (← Back): its state and history say whether it was. "+
			"Doing it again is safe: it is guarded by the fencing token you saw (%d) and is refused if the key moved on.", a.Label, err, token)
		cs.render(w, r, http.StatusServiceUnavailable, "message.html", page{Nav: "executions", Data: message{Kind: "error",
			Heading: a.Label + ": failed, outcome not known", Text: text, Back: back, Exec: ev}})
	}
}

// doneText says what a done action did, for callers, and what follows:
// seen is the token the operator acted at (for resolve, the token it
// completed at), rec Reconcile's answer.
func doneText(action, label, ns, key string, seen int64, name string, rec *sentinel.Execution) string {
	did := fmt.Sprintf("%s %q (namespace %q), seen at token %d; recorded in its history as done by %s.", label, key, ns, seen, name)
	switch action {
	case "reconcile":
		now := ""
		if rec != nil {
			now = fmt.Sprintf(" It is now reconciling at token %d: the old worker can no longer complete it.", rec.Token)
		}
		return did + now + " Every caller gets ErrReconciling until you finish: find out whether the side effect happened, " +
			"then, from the key's page (← Back), force-complete it (it happened: callers get the value you store) or reset it to claimed (it did not: the next caller runs fn again)."
	case "force_complete":
		return did + " Every caller now gets the value you stored, as a cached result; fn does not run again."
	case "reset":
		return did + " The key is claimed with no live lease: the next caller runs fn again."
	case "resolve":
		return fmt.Sprintf("%s %q (namespace %q), completed at token %d; recorded in its history as done by %s. Repeats of the request now get this response, with Idempotent-Replayed: true.",
			label, key, ns, seen, name)
	}
	return did
}

// notJSON says what is wrong with a force-complete value that is not JSON,
// and where (line and column, as an editor counts them), with what to do;
// "" when it is JSON.
func notJSON(value string) string {
	var v json.RawMessage // syntax only: a number beyond float64 is ForceComplete's to refuse
	err := json.Unmarshal([]byte(value), &v)
	if err == nil {
		return ""
	}
	const how = " Correct it (text goes in double quotes: \"sent\"; no comma after the last member) and confirm again."
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return "The value is not valid JSON: " + err.Error() + "." + how
	}
	at := int(se.Offset)
	if at > len(value) {
		at = len(value)
	}
	if at >= len(value) && strings.Contains(se.Error(), "end of JSON input") {
		return "The value is not valid JSON: it ends too early (a closing brace, bracket or quote is missing)." + how
	}
	if at > 0 {
		at-- // Offset is after the byte that was wrong
	}
	line := 1 + strings.Count(value[:at], "\n")
	col := 1 + utf8.RuneCountInString(value[strings.LastIndex(value[:at], "\n")+1:at])
	return fmt.Sprintf("The value is not valid JSON: %s, at line %d, column %d.%s", se.Error(), line, col, how)
}
