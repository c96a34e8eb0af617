package console

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// HTTP keys: executions written by the idempotency middleware. The page
// shows them as HTTP (the client's key and scope, the request's method and
// path, responses decoded) and resolves them with a response, through
// package idempotency's Inspect and Resolve: the stored format is
// described there only.

// httpKey is an HTTP key as its pages show it.
type httpKey struct {
	Scope, Key    string
	Method, Path  string
	Fingerprint   string
	Response      *respView // the stored response of a completed key
	ResponseError string    // why a completed key's result cannot be replayed
	Refused       *respView // the response of a run whose completion was refused
}

// respView is a response, decoded for reading.
type respView struct {
	Status     int
	StatusText string
	Headers    []string // "Name: value", sorted
	Body       string   // text, or base64 when BodyBase64
	Trailers   []string // the trailer fields sent after the body, as Headers
	BodyBase64 bool
	TooLarge   bool
}

func toRespView(r *idempotency.Response) *respView {
	if r == nil {
		return nil
	}
	if r.Status < 0 {
		return &respView{TooLarge: true}
	}
	v := &respView{Status: r.Status, StatusText: http.StatusText(r.Status), Headers: headerLines(r.Header), Trailers: headerLines(r.Trailer)}
	if utf8.Valid(r.Body) {
		v.Body = string(r.Body)
	} else {
		v.Body, v.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body), true
	}
	return v
}

func headerLines(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	sort.Strings(out)
	return out
}

// readHTTPKey returns the HTTP view of ex, or nil when ex is not a
// middleware key (or cannot be read as one).
func (cs *Console) readHTTPKey(ctx context.Context, ex *sentinel.Execution) *httpKey {
	scope, key, ok := idempotency.ParseExecutionKey(ex.Key)
	if !ok {
		return nil
	}
	rec, err := idempotency.Inspect(ctx, cs.c, scope, key, sentinel.WithNamespace(ex.Namespace))
	if err != nil {
		cs.opts.Logger.Error("console: inspect an HTTP key", "namespace", ex.Namespace, "key", ex.Key, "err", err)
		return &httpKey{Scope: scope, Key: key}
	}
	return &httpKey{Scope: scope, Key: key, Method: rec.Request.Method, Path: rec.Request.Path, Fingerprint: rec.Request.Fingerprint,
		Response: toRespView(rec.Response), ResponseError: rec.ResponseError, Refused: toRespView(rec.Refused)}
}

// resolvable reports whether an HTTP key can be resolved now: uncertain,
// reconciling, or rerun pending for longer than Options.RerunPendingAfter
// (no repeat of the request came back: its page says to resolve it, as
// sentinel idempotency inspect does). idempotency.Resolve reconciles an
// executing key whose lease ended before completing it.
func resolvable(e execView) bool {
	return e.Uncertain || e.RerunStale || e.State == sentinel.StateReconciling
}

// resolveForm is what the confirmation form of "resolve" carries.
type resolveForm struct {
	Status  string
	Headers string // one "Name: value" per line
	Body    string
}

// prefill proposes the refused response, when there is one.
func (h *httpKey) prefill() resolveForm {
	f := resolveForm{Status: "201", Headers: "Content-Type: application/json"}
	if r := h.Refused; r != nil && !r.TooLarge && !r.BodyBase64 {
		f = resolveForm{Status: strconv.Itoa(r.Status), Headers: strings.Join(r.Headers, "\n"), Body: r.Body}
	}
	return f
}

// parseResolve reads the resolve form into a response for the request with
// fingerprint fp. Errors are for the operator.
func parseResolve(f url.Values, fp string) (idempotency.Response, error) {
	status, err := strconv.Atoi(strings.TrimSpace(f.Get("status")))
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("the status must be a number from 200 to 599")
	}
	h := http.Header{}
	for _, line := range strings.Split(strings.ReplaceAll(f.Get("headers"), "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return idempotency.Response{}, fmt.Errorf("header line %q: write one 'Name: value' per line", line)
		}
		h.Add(k, v)
	}
	body := strings.ReplaceAll(f.Get("body"), "\r\n", "\n") // browsers send CRLF in textareas
	return idempotency.NewResponse(fp, status, h, []byte(body))
}
