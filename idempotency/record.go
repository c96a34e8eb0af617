package idempotency

// This file: The record of a key: execution keys and scopes, the stored Response (decoded, checked, written back, encoded), the headers never stored, and what operators read and write (Request, Record, Inspect, Resolve, Command).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/shell"
)

// This file is the one description of what the middleware stores, used by
// the middleware itself, by `sentinel idempotency` and by the
// reconciliation page (console): the execution key naming a client's key,
// the stored response, and the request recorded with the claim.

// KeyPrefix starts every Sentinel execution key the middleware writes.
const KeyPrefix = "idempotency:"

// ExecutionKey returns the Sentinel execution key under which the
// middleware keeps the client's Idempotency-Key value key for scope (what
// Options.Scope returned; "" for SingleTenant):
// "idempotency:<len(scope)>:<scope>:<key>". The length prefix keeps every
// scope/key pair apart.
func ExecutionKey(scope, key string) string {
	return KeyPrefix + strconv.Itoa(len(scope)) + ":" + scope + ":" + key
}

// ParseExecutionKey splits an execution key written by the middleware into
// its scope and the client's key (never empty). ok is false for any other
// key.
func ParseExecutionKey(execKey string) (scope, key string, ok bool) {
	rest, found := strings.CutPrefix(execKey, KeyPrefix)
	if !found {
		return "", "", false
	}
	n, rest, found := strings.Cut(rest, ":")
	if !found {
		return "", "", false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || strconv.Itoa(l) != n || len(rest) < l+2 || rest[l] != ':' {
		return "", "", false
	}
	return rest[:l], rest[l+1:], true
}

// SingleTenant is the Options.Scope of a service with one principal: every
// request shares one scope. Middleware recognises this function and stores
// its keys with the empty scope (as keys were stored before Scope was
// required), which `sentinel idempotency` addresses when --scope is
// omitted. Wrapping it in another function does not work: a Scope that
// returns "" refuses the request.
func SingleTenant(*http.Request) string { return "" }

func isSingleTenant(f func(*http.Request) string) bool {
	return f != nil && reflect.ValueOf(f).Pointer() == reflect.ValueOf(SingleTenant).Pointer()
}

// Response is an HTTP response as the middleware stores it (the result of
// the key's execution, JSON) and replays it. Fingerprint identifies the
// request it answers (see Request): a repeat with another fingerprint gets
// 422.
type Response struct {
	Fingerprint string      `json:"fingerprint"`
	Status      int         `json:"status"` // -1: the response was too large to store
	Header      http.Header `json:"header,omitempty"`
	Body        []byte      `json:"body,omitempty"` // base64 in the JSON
	// Trailer holds the trailer fields the handler sent after the body
	// (declared in its Trailer header, or set with http.TrailerPrefix),
	// sent again as trailers; nil when none.
	Trailer http.Header `json:"trailer,omitempty"`
}

// statusTooLarge marks a stored Response for a handler whose response
// exceeded Options.MaxResponseBytes.
const statusTooLarge = -1

// ErrNotResponse is matched by the error of DecodeResponse and CheckResult
// when a stored result is not a response the middleware can replay.
var ErrNotResponse = errors.New("idempotency: not a stored HTTP response the middleware can replay")

// DecodeResponse decodes the stored result of a middleware key. It fails
// with an error matching ErrNotResponse unless data is a response the
// middleware can replay: a JSON object with a fingerprint and a status
// from 200 to 999, as net/http sends them (or the too-large marker).
func DecodeResponse(data []byte) (Response, error) {
	var r Response
	if len(data) == 0 {
		return r, fmt.Errorf("%w: the key has no stored result", ErrNotResponse)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("%w: %v", ErrNotResponse, err)
	}
	if r.Fingerprint == "" {
		return r, fmt.Errorf("%w: it has no request fingerprint", ErrNotResponse)
	}
	// Up to 999, as net/http sends it: a handler's 799 is stored as the
	// client got it, and must be replayed as such.
	if r.Status != statusTooLarge && (r.Status < 200 || r.Status > 999) {
		return r, fmt.Errorf("%w: status %d is not a final HTTP status (200-999)", ErrNotResponse, r.Status)
	}
	return r, nil
}

func (s Response) write(w http.ResponseWriter, replayed bool) {
	h := w.Header()
	stored := s.Header
	if replayed {
		// Again on the way out: a record stored before names were
		// compared in any case may hold a "set-cookie".
		stored = StoredHeader(stored)
	}
	for k, v := range stored {
		h[k] = append([]string(nil), v...)
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	trailer := s.Trailer
	if replayed {
		trailer = StoredHeader(trailer)
	}
	// Declared before the header goes out, so that net/http sends the
	// trailer fields set after the body.
	for _, k := range slices.Sorted(maps.Keys(trailer)) {
		h.Add("Trailer", k)
	}
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
	for k, v := range trailer {
		h[k] = append([]string(nil), v...)
	}
}

// encode is r as stored.
func (r Response) encode() json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		panic("idempotency: encode a response: " + err.Error()) // an http.Header and []byte always encode
	}
	return b
}

// CheckResult reports whether value (JSON) may be stored as the result of
// the execution execKey: nil for a key the middleware did not write, an
// error matching ErrNotResponse and naming `sentinel idempotency resolve`
// when the middleware could not replay value for it. The generic operator
// tools (sentinel force-complete, set-result, the console) call it before
// storing a value.
func CheckResult(execKey string, value []byte) error {
	scope, key, ok := ParseExecutionKey(execKey)
	if !ok {
		return nil
	}
	if _, err := DecodeResponse(value); err != nil {
		who := fmt.Sprintf("Idempotency-Key %q", key)
		if scope != "" {
			who += fmt.Sprintf(" of scope %q", scope)
		}
		return fmt.Errorf("%q is the %s, written by the idempotency middleware, and it could not replay this value to the client (%w); "+
			"resolve it with an HTTP response instead (see: sentinel idempotency resolve --help)", execKey, who, err)
	}
	return nil
}

func init() {
	// For the middleware's keys, sentinel.Client.ForceComplete and
	// SetResult refuse a value the middleware could not replay.
	sentinel.RegisterResultCheck(CheckResult)
}

// ResolveCommand is the `sentinel idempotency resolve` command line that
// resolves the client's key in scope, in the default namespace and schema.
// Run on a terminal, it asks for the response.
//
// Deprecated: use Command, which names the namespace and schema the key
// lives in, so that the line runs as printed.
func ResolveCommand(scope, key string) string {
	return Command("resolve", key, scope, "", "")
}

// Command returns the `sentinel idempotency` command line sub (the
// subcommand and any flags of its own, such as "inspect" or "resolve
// --refused") for the client's key in scope, in namespace ns of the
// Sentinel schema schema, for messages to a person. It carries --scope,
// -n and --schema when they differ from the command's defaults (no scope,
// namespace "default", schema "sentinel"; "" means the default), each
// value quoted for a POSIX shell, so that it runs as printed given the
// database connection. A key that reads as a flag (an Idempotency-Key
// starting with "-", as one base64url key in 64 does) goes last, after
// "--", the flags before it.
func Command(sub, key, scope, ns, schema string) string {
	flags := ""
	if scope != "" {
		flags += " --scope " + shell.Quote(scope)
	}
	if ns != "" && ns != "default" {
		flags += " -n " + shell.Quote(ns)
	}
	if schema != "" && schema != "sentinel" {
		flags += " --schema " + shell.Quote(schema)
	}
	if strings.HasPrefix(key, "-") {
		return "sentinel idempotency " + sub + flags + " -- " + shell.Quote(key)
	}
	return "sentinel idempotency " + sub + " " + shell.Quote(key) + flags
}

// credentialHeaders are never stored nor replayed: they carry one
// principal's credentials or session (RFC 9110 section 11, RFC 6265). A
// handler that sets a cookie sets it on the first response only.
var credentialHeaders = []string{"Set-Cookie", "Set-Cookie2", "Authorization", "Proxy-Authorization",
	"Authentication-Info", "Proxy-Authentication-Info"}

// hopHeaders are not stored: they describe one connection or message.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Trailer", "Upgrade",
	"Te", "Content-Length", "Date"}

// retryHeaders are not stored: they ask the client to send the request
// again later (RFC 9110 section 10.2.3), and a replay cannot change: the
// retry would get the same stored answer. The first response keeps them.
var retryHeaders = []string{"Retry-After"}

// StoredHeader returns the part of h the middleware stores and replays: h
// without per-connection headers (Connection, Transfer-Encoding,
// Content-Length, Date, ..., and every header h's Connection names, which
// RFC 9110 section 7.6.1 makes hop-by-hop), without Retry-After (a replay
// cannot change, so it must not invite a retry of the same request) and
// without credentials (Set-Cookie, Set-Cookie2, Authorization,
// Proxy-Authorization, Authentication-Info, Proxy-Authentication-Info), so
// that no replay hands one principal's session to another. Names compare
// as HTTP compares them, whatever their case: a handler's
// w.Header()["set-cookie"] is a Set-Cookie too. The names kept are in
// canonical form (textproto.CanonicalMIMEHeaderKey), the values of names
// equal but for case merged in sorted order. nil when nothing is left.
func StoredHeader(h http.Header) http.Header {
	return storedHeader(h, connectionNames(h))
}

// storedHeader is StoredHeader, with hop the canonical names the
// response's Connection header lists (a trailer is filtered by its
// header's).
func storedHeader(h http.Header, hop map[string]bool) http.Header {
	var out http.Header
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if unstored(k) || hop[textproto.CanonicalMIMEHeaderKey(k)] {
			continue
		}
		if out == nil {
			out = make(http.Header, len(h))
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		out[ck] = append(out[ck], h[k]...)
	}
	return out
}

// connectionNames returns the field names h's Connection header lists
// (under any spelling of Connection), in canonical form: the connection
// options of RFC 9110 section 7.6.1, such as close or keep-alive, and the
// headers the sender made hop-by-hop by naming them. nil when none.
func connectionNames(h http.Header) map[string]bool {
	var out map[string]bool
	for k, vs := range h {
		if !strings.EqualFold(k, "Connection") {
			continue
		}
		for _, v := range vs {
			for name := range strings.SplitSeq(v, ",") {
				if name = textproto.TrimString(name); name != "" {
					if out == nil {
						out = make(map[string]bool)
					}
					out[textproto.CanonicalMIMEHeaderKey(name)] = true
				}
			}
		}
	}
	return out
}

// unstored reports whether the header name is one StoredHeader drops: a
// per-connection header, Retry-After or a credential, in any case.
func unstored(name string) bool {
	for _, list := range [][]string{hopHeaders, retryHeaders, credentialHeaders} {
		for _, k := range list {
			if strings.EqualFold(name, k) {
				return true
			}
		}
	}
	return false
}

// withoutHop returns h without its per-connection headers, in any case.
func withoutHop(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		if !slices.ContainsFunc(hopHeaders, func(hop string) bool { return strings.EqualFold(k, hop) }) {
			out[k] = v
		}
	}
	return out
}

// NewResponse builds the stored form of a response answering the request
// with fingerprint fp: the value `sentinel idempotency resolve` stores. It
// checks status (200-599), that a body declared JSON (Content-Type
// application/json or any +json type) is JSON, and keeps only the headers
// StoredHeader keeps.
func NewResponse(fp string, status int, header http.Header, body []byte) (Response, error) {
	if fp == "" {
		return Response{}, errors.New("idempotency: the request's fingerprint is unknown (no claim in the key's history), so no response can be matched to it")
	}
	if status < 200 || status > 599 {
		return Response{}, fmt.Errorf("idempotency: status %d: give a final HTTP status from 200 to 599", status)
	}
	for k, vs := range header {
		if !validHeaderName(k) {
			return Response{}, fmt.Errorf("idempotency: header name %q: HTTP allows only letters, digits and !#$%%&'*+-.^_`|~ in a name", k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return Response{}, fmt.Errorf("idempotency: header %s: value %q holds a control character HTTP does not allow", k, v)
			}
		}
	}
	if ct := header.Get("Content-Type"); len(body) > 0 && isJSON(ct) && !json.Valid(body) {
		var se *json.SyntaxError
		err := json.Unmarshal(body, new(any))
		where := ""
		if errors.As(err, &se) {
			where = fmt.Sprintf(" at byte %d", se.Offset)
		}
		return Response{}, fmt.Errorf("idempotency: the body is not valid JSON%s (%v), but its Content-Type is %s: fix the body, or give the Content-Type it has", where, err, ct)
	}
	return Response{Fingerprint: fp, Status: status, Header: StoredHeader(header), Body: body}, nil
}

// validHeaderName reports whether name is an HTTP field name (RFC 9110's
// token): a header that is not one is dropped or refused on the way to the
// client, never delivered as stored.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v is an HTTP field value: no control
// character but horizontal tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// Request is the request that claimed a middleware key, as recorded in the
// key's history with its claim.
type Request struct {
	Method string
	// Path is the request's path and, after "?", its query as sent
	// (records made before v0.3 hold the path alone).
	Path        string
	Fingerprint string
	Token       int64     // the fencing token of that claim
	At          time.Time // when it claimed the key (database clock)
}

// RequestOf returns the request of the last claim in a key's history
// (sentinel.Client.History) or last run (sentinel.Client.LastRun, which
// reads less). ok is false when the history has none.
func RequestOf(events []sentinel.Event) (req Request, ok bool) {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Type != "claimed" {
			continue
		}
		req = Request{Token: ev.Token, At: ev.At}
		req.Method, _ = ev.Metadata["method"].(string)
		req.Path, _ = ev.Metadata["path"].(string)
		req.Fingerprint, _ = ev.Metadata["fingerprint"].(string)
		return req, true
	}
	return Request{}, false
}

// RefusedResponse returns the response the handler produced for the key's
// last run when its completion was refused (the lease was lost before the
// response was stored): the history's completion_refused event carries
// it. events is the key's history or last run (sentinel.Client.LastRun),
// oldest first. ok is false when there is none, or it is not a response.
func RefusedResponse(events []sentinel.Event) (resp Response, ok bool) {
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Type {
		case "completion_refused":
			var b []byte
			var err error
			if raw, found := events[i].Metadata["result"]; found {
				b, err = json.Marshal(raw)
			} else if s, found := events[i].Metadata["result_base64"].(string); found {
				// The result as encoded, when jsonb could not hold it
				// (a NUL in a header, say).
				b, err = base64.StdEncoding.DecodeString(s)
			} else {
				return Response{}, false
			}
			if err != nil {
				return Response{}, false
			}
			r, err := DecodeResponse(b)
			return r, err == nil && r.Status != statusTooLarge
		case "started", "claimed":
			return Response{}, false
		}
	}
	return Response{}, false
}

// Record is a middleware key as operators see it.
type Record struct {
	Scope     string
	Key       string // the client's Idempotency-Key value
	Execution *sentinel.Execution
	Request   Request // zero when the history has no claim (pruned)
	// Response is the stored response of a completed key (nil otherwise);
	// ResponseError says why a completed key's result cannot be replayed.
	Response      *Response
	ResponseError string
	// Refused is the response of a run whose completion was refused.
	Refused *Response
}

// Uncertain reports whether the key is uncertain: executing with an
// expired lease.
func (r *Record) Uncertain() bool {
	return r.Execution.State == sentinel.StateExecuting && !r.Execution.LeaseAlive
}

// checkCtx refuses a nil ctx given to call, as the sentinel package's calls
// do: first, before anything is read or written.
func checkCtx(call string, ctx context.Context) error {
	if ctx == nil {
		return &sentinel.InvalidError{Field: "ctx", Reason: "must not be nil in " + call + " (use context.Background())"}
	}
	return nil
}

// Inspect reads the record of the client's key in scope, in the namespace
// given by opts (sentinel.WithNamespace; default the client's). A key with
// no execution returns an error matching sentinel.ErrNotFound.
// A nil ctx is refused (sentinel.ErrInvalid).
func Inspect(ctx context.Context, c *sentinel.Client, scope, key string, opts ...sentinel.Option) (*Record, error) {
	if err := checkCtx("idempotency.Inspect", ctx); err != nil {
		return nil, err
	}
	execKey := ExecutionKey(scope, key)
	ex, err := c.Inspect(ctx, execKey, opts...)
	if err != nil {
		return nil, err
	}
	evs, err := c.LastRun(ctx, execKey, opts...)
	if err != nil {
		return nil, err
	}
	rec := &Record{Scope: scope, Key: key, Execution: ex}
	rec.Request, _ = RequestOf(evs)
	if ex.State == sentinel.StateCompleted {
		switch r, err := DecodeResponse(ex.Result); {
		case ex.ResultError != "":
			rec.ResponseError = "not stored: " + ex.ResultError
		case err != nil:
			rec.ResponseError = err.Error()
		default:
			rec.Response = &r
		}
	} else if r, ok := RefusedResponse(evs); ok {
		rec.Refused = &r
	}
	return rec, nil
}

// Resolve completes an uncertain or reconciling middleware key with resp
// (or one rerun pending, Options.Rerun, whose lease ended: a repeat that
// would re-run it never came), or stores resp as the response of a key
// that completed with its response not stored (sentinel.ErrResultLost:
// its repeats get 500 ProblemNotStored), so that the client's repeat of
// the same request gets resp with Idempotent-Replayed: true. resp.Fingerprint must
// be the request's (see NewResponse and Record.Request). An executing key
// whose lease ended (uncertain, or rerun pending) is first reconciled
// (sentinel.Client.Reconcile, which mints a new token), then
// force-completed at that token. It returns the token the key completed
// at. A response whose fingerprint is not the claiming request's is
// refused; credentials in resp.Header and resp.Trailer are dropped (see StoredHeader).
//
// Every write is guarded by a token, so that resp never completes a claim
// other than the one it answers: with sentinel.WithToken, the token the
// operator inspected (pass Record.Execution.Token when resp was built from
// a Record); without it, the token Resolve reads with the request's
// fingerprint. If the key moved on meanwhile (another operator reset it
// and a newer request claimed it), the write is refused with an error
// matching sentinel.ErrWrongState and nothing changes.
// A nil ctx is refused (sentinel.ErrInvalid).
func Resolve(ctx context.Context, c *sentinel.Client, scope, key string, resp Response, opts ...sentinel.Option) (int64, error) {
	if err := checkCtx("idempotency.Resolve", ctx); err != nil {
		return 0, err
	}
	if _, err := NewResponse(resp.Fingerprint, resp.Status, nil, nil); err != nil {
		return 0, err
	}
	resp.Header, resp.Trailer = StoredHeader(resp.Header), StoredHeader(resp.Trailer)
	execKey := ExecutionKey(scope, key)
	// The value is checked before the first write: an uncertain key is
	// reconciled before it is force-completed, and a value refused then
	// would leave it reconciling, unresolved.
	data, err := json.Marshal(resp)
	if err != nil {
		return 0, err
	}
	if err := CheckResult(execKey, data); err != nil {
		return 0, err
	}
	if limit := c.Config().MaxResultSize; len(data) > limit {
		return 0, &sentinel.InvalidError{Field: "response", Reason: fmt.Sprintf(
			"stored, it is %d bytes, over the client's Config.MaxResultSize %d: nothing was written", len(data), limit)}
	}
	ex, err := c.Inspect(ctx, execKey, opts...)
	if err != nil {
		return 0, err
	}
	evs, err := c.LastRun(ctx, execKey, opts...)
	if err != nil {
		return 0, err
	}
	req, ok := RequestOf(evs)
	if ok && req.Token > ex.Token {
		return 0, &sentinel.ExecutionError{Kind: sentinel.ErrWrongState, Namespace: ex.Namespace, Key: ex.Key, State: ex.State,
			Owner: ex.Owner, Token: ex.Token, Since: ex.Since(),
			Cause: fmt.Errorf("a newer request claimed the key (token %d) while it was read; inspect it again", req.Token)}
	}
	if ok && req.Fingerprint != "" && req.Fingerprint != resp.Fingerprint {
		return 0, fmt.Errorf("idempotency: the response's fingerprint %s is not that of the request that claimed %q (%s %s, %s): "+
			"its retries would get 422; build the response with NewResponse(record.Request.Fingerprint, ...)",
			resp.Fingerprint, key, req.Method, req.Path, req.Fingerprint)
	}
	// The token just read guards the writes; the operator's WithToken, if
	// any, comes after it in opts and wins.
	guarded := append([]sentinel.Option{sentinel.WithToken(ex.Token)}, opts...)
	var fopts []sentinel.Option
	switch {
	case ex.State == sentinel.StateExecuting:
		// Reconcile refuses a live lease itself, with the reason.
		rex, err := c.Reconcile(ctx, execKey, guarded...)
		if err != nil {
			return 0, err
		}
		// Complete exactly the reconciliation just started.
		fopts = append(append(fopts, opts...), sentinel.WithToken(rex.Token))
	case ex.State == sentinel.StateReconciling:
		fopts = guarded
	case ex.ResultLost():
		// Completed, its response not stored (every repeat gets 500
		// ProblemNotStored): resp is stored as its result, at its token,
		// which storing does not change.
		if err := c.SetResult(ctx, execKey, json.RawMessage(data), guarded...); err != nil {
			return 0, err
		}
		return ex.Token, nil
	default:
		return 0, &sentinel.ExecutionError{Kind: sentinel.ErrWrongState, Namespace: ex.Namespace, Key: ex.Key, State: ex.State,
			Owner: ex.Owner, Token: ex.Token, Since: ex.Since(),
			Cause: fmt.Errorf("only an uncertain or reconciling key, or a completed one whose response was not stored, can be resolved; this one is %s", ex.State)}
	}
	if err := c.ForceComplete(ctx, execKey, json.RawMessage(data), fopts...); err != nil {
		return 0, err
	}
	done, err := c.Inspect(ctx, execKey, opts...)
	if err != nil {
		return 0, err
	}
	return done.Token, nil
}

// BodyText is body as an operator reads it: the text when it is UTF-8,
// else base64 with a note.
func BodyText(body []byte) string {
	if !utf8.Valid(body) {
		return "(base64) " + base64.StdEncoding.EncodeToString(body)
	}
	return string(body)
}
