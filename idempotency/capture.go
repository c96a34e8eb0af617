package idempotency

// This file: The capture of a handler's response: the recorder (the buffered ResponseWriter: 1xx, 101 and Hijack, Flush, deadlines), NoEffect and Uncertain, and the response as sent and as stored.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// recorder buffers a handler's response, up to max body bytes.
type recorder struct {
	under     http.ResponseWriter // the server's writer, for deadlines (SetWriteDeadline...)
	header    http.Header
	sent      http.Header // the header as of WriteHeader
	status    int
	body      bytes.Buffer
	max       int
	overflow  bool
	noEffect  bool   // the handler called NoEffect
	uncertain error  // the handler called Uncertain: why
	switched  bool   // the handler sent 101 Switching Protocols, live
	onSwitch  func() // after the 101: gives the key back, arms HardTTL; nil when the request did not ask to switch
	givenBack bool   // onSwitch gave the key back
}

// Uncertain says that the outcome of the request the handler is serving is
// unknown: it may or may not have taken effect (the payment provider timed
// out after the request was sent). The key becomes uncertain: this
// request and every retry with the key get the uncertain problem (500,
// ProblemUncertain, naming the command that inspects the key), the
// handler is not run again for it, and operators find it with `sentinel
// idempotency list --uncertain` and resolve it as any uncertain key, with
// the response the client's retries should get (or reconcile and reset
// it, so that the next retry runs). cause is recorded in the key's
// history, as text: it does not decide the outcome (a cause marked
// sentinel.Retryable or Final, or matching a sentinel error, leaves the
// key uncertain all the same). Whatever the handler writes to w is
// discarded.
//
// Call it from the handler given w (or a writer wrapping it with an
// Unwrap() http.ResponseWriter method), before returning. In
// transactional mode the handler's database writes are rolled back, and
// the key is uncertain all the same: what is unknown is the effect outside
// the database. When w is not the middleware's (the request had no
// Idempotency-Key, or is not behind Middleware) it does nothing, and what
// the handler writes is sent.
//
// Use it instead of storing an error response when the handler cannot
// tell whether the effect happened; use NoEffect when it knows nothing
// happened. With Options.Rerun (the handler's effect is deduplicated
// downstream by sentinel.EffectKey), while attempts remain this request
// gets ProblemRerun (503, with Retry-After) instead, and a repeat of the
// same request runs the handler again, as after a crash; the request of
// the last attempt gets ProblemUncertain and the key is left for an
// operator.
func Uncertain(w http.ResponseWriter, cause error) {
	rec := recorderOf(w)
	if rec == nil {
		return
	}
	if cause == nil {
		cause = errors.New("no cause given")
	}
	// The cause's text only: an error chain marked for sentinel
	// (Retryable, Final, or one matching ErrInProgress from a nested call)
	// would decide the outcome instead of Uncertain, handing the key back
	// for a retry that runs the handler again.
	rec.uncertain = errors.New("idempotency: the handler reported the outcome unknown: " + cause.Error())
}

// recorderOf finds the middleware's writer under w.
func recorderOf(w http.ResponseWriter) *recorder {
	for w != nil {
		if rec, ok := w.(*recorder); ok {
			return rec
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// NoEffect marks the response the handler is writing as one after which
// nothing happened (the card network was unreachable, a dependency said
// no before any effect): the middleware sends it but does not store it,
// and gives the key back, so the client's retry with the same key runs
// the handler again. In transactional mode it also rolls the transaction
// back. This holds after the request's lease was lost too (the handler
// ran past HardTTL, or heartbeats could not renew it): the key is given
// back under the request's fencing token, unless an operator took it over
// meanwhile (Reconcile), when it stays theirs; the request gets its
// response either way. Call it before returning, from the handler given w (or a writer
// wrapping it with an Unwrap() http.ResponseWriter method). It reports
// false, changing nothing, when w is not the middleware's (the request
// had no Idempotency-Key, or is not behind Middleware).
//
// With Options.Rerun, in a re-run (sentinel.Attempt above 1: an earlier
// attempt stopped without a response and may have had its effect) the key
// is not given back but left for the next re-run, which the retry makes;
// in the last attempt Rerun allows none is left, so the key is uncertain
// and the request gets the uncertain problem instead of this response.
//
// By default every response is stored, 5xx included, because a handler
// that failed may have had an effect first: the replay then tells the
// client what happened instead of running it twice. Use NoEffect only
// when the handler knows that nothing took effect; when in doubt, let the
// response be stored. Options.Store decides by status for all responses;
// NoEffect decides for one.
//
// A key given back belongs to no request: the next request with it runs,
// even one with another body (no 422, as for a request refused before
// its handler ran), and its handler reads the same sentinel.EffectKey.
// So when the handler passed that reference downstream, call NoEffect only
// if the provider kept nothing under it: a provider that stores a decline
// under its idempotency reference answers the next request with that
// decline, or refuses its other parameters.
func NoEffect(w http.ResponseWriter) bool {
	rec := recorderOf(w)
	if rec == nil {
		return false
	}
	rec.noEffect = true
	return true
}

// ErrResponseTooLarge is returned by the ResponseWriter's Write when the
// response body would exceed Options.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("idempotency: response body exceeds MaxResponseBytes and cannot be stored")

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		// As net/http's own writer: such a status cannot be sent, nor
		// stored to be replayed.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if rec.status == 0 && code >= 200 {
		rec.status = code
		rec.sent = rec.header.Clone() // later changes are not sent, as with net/http
	}
	if rec.status == 0 && code == http.StatusSwitchingProtocols && rec.under != nil {
		rec.switchProtocols()
	}
	if rec.status == 0 && code < 200 && code != http.StatusSwitchingProtocols && rec.under != nil {
		rec.informational(code)
	}
}

// switchProtocols sends the handler's 101 Switching Protocols now, with
// its header as it is (Connection and Upgrade included), as net/http does:
// what follows is not HTTP (the handler takes the connection over with
// Hijack), so it can be neither stored nor replayed. The request is then
// not protected by its key: the middleware stores nothing, gives the key
// back (onSwitch, now, when the request asked to switch; else when the
// handler returns; in transactional mode the handler's transaction rolls
// back when it returns) and writes nothing more.
func (rec *recorder) switchProtocols() {
	rec.status = http.StatusSwitchingProtocols
	rec.switched = true
	uh := rec.under.Header()
	for k, v := range rec.header {
		uh[k] = append([]string(nil), v...)
	}
	rec.under.WriteHeader(http.StatusSwitchingProtocols)
	if rec.onSwitch != nil {
		rec.onSwitch()
	}
}

// informational sends a 1xx response (103 Early Hints, say) to the client
// now, as net/http does, with the handler's header as it is (without its
// per-connection fields). It is never stored: a replay sends the final
// response alone. The server's header is as it was before, after.
func (rec *recorder) informational(code int) {
	uh := rec.under.Header()
	before := uh.Clone()
	for k, v := range withoutHop(rec.header) {
		uh[k] = v
	}
	rec.under.WriteHeader(code)
	for k := range uh {
		delete(uh, k)
	}
	maps.Copy(uh, before)
}

func (rec *recorder) Write(p []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	if rec.status == http.StatusNoContent || rec.status == http.StatusNotModified || rec.switched {
		// As net/http's own writer: such a response has no body, so
		// none is stored (it would be shown, never sent); after a 101
		// the connection is the handler's, through Hijack.
		return 0, http.ErrBodyNotAllowed
	}
	if rec.body.Len()+len(p) > rec.max {
		rec.overflow = true
		return 0, ErrResponseTooLarge
	}
	return rec.body.Write(p)
}

// Flush is http.Flusher's, for handlers written for any server (a
// framework that flushes after each write, a type assertion without a
// check): the response is buffered until it is stored, so nothing reaches
// the client earlier. As with net/http, the header is fixed by the first
// Flush (200 when WriteHeader was not called).
func (rec *recorder) Flush() {
	rec.WriteHeader(http.StatusOK)
	if rec.switched {
		_ = http.NewResponseController(rec.under).Flush() // the 101, sent
	}
}

// errHijackBuffered is Hijack's error before a 101 Switching Protocols.
var errHijackBuffered = errors.New("idempotency: the response is buffered until it is stored, so the connection cannot be taken over; " +
	"a handler behind the middleware may Hijack only after WriteHeader(http.StatusSwitchingProtocols)")

// Hijack is http.Hijacker's, for a handler that switches protocols: after
// WriteHeader(http.StatusSwitchingProtocols) it hands over the server's
// connection (see switchProtocols). Before, it fails: the response is
// buffered until it is stored, and a connection taken over would bypass
// it.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !rec.switched {
		return nil, nil, errHijackBuffered
	}
	return http.NewResponseController(rec.under).Hijack()
}

// SetReadDeadline, SetWriteDeadline and EnableFullDuplex are what
// http.ResponseController asks of a writer: a handler that sets its
// deadlines behind the middleware gets the server's (it got "feature not
// supported"). They act on the connection, not on the response, which
// the middleware still buffers.
func (rec *recorder) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(rec.under).SetReadDeadline(t)
}

// SetWriteDeadline: see SetReadDeadline.
func (rec *recorder) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(rec.under).SetWriteDeadline(t)
}

// EnableFullDuplex: see SetReadDeadline.
func (rec *recorder) EnableFullDuplex() error {
	return http.NewResponseController(rec.under).EnableFullDuplex()
}

func (rec *recorder) statusCode() int {
	if rec.status == 0 {
		return http.StatusOK
	}
	return rec.status
}

// sentResponse is the response as sent to the request that ran the
// handler: every header but the per-connection ones, except Connection
// (a handler's "Connection: close" closes this client's connection after
// the response, as without the middleware; replays leave it out).
func (rec *recorder) sentResponse() Response {
	h := rec.sent
	if h == nil {
		h = rec.header
	}
	out := withoutHop(h)
	for k, v := range h {
		if strings.EqualFold(k, "Connection") {
			out["Connection"] = append(out["Connection"], v...)
		}
	}
	return Response{Status: rec.statusCode(), Header: out, Body: rec.body.Bytes(), Trailer: rec.trailer()}
}

// trailer returns the trailer fields the handler set, as net/http would
// send them: the final values of the names its header declared in Trailer
// when it was written, and the fields set with http.TrailerPrefix. nil
// when there are none.
func (rec *recorder) trailer() http.Header {
	h := rec.sent
	if h == nil {
		h = rec.header
	}
	var out http.Header
	add := func(name string, v []string) {
		if name == "" || len(v) == 0 {
			return
		}
		if out == nil {
			out = make(http.Header)
		}
		ck := textproto.CanonicalMIMEHeaderKey(name)
		out[ck] = append(out[ck], v...)
	}
	for _, decl := range h.Values("Trailer") {
		for name := range strings.SplitSeq(decl, ",") {
			name = textproto.TrimString(name)
			add(name, rec.header.Values(name))
		}
	}
	for k, v := range rec.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(name, v)
		}
	}
	return out
}

func (rec *recorder) stored(fp string) Response {
	h := rec.sent
	if h == nil {
		h = rec.header
	}
	hop := connectionNames(h)
	return Response{Fingerprint: fp, Status: rec.statusCode(), Header: storedHeader(h, hop), Body: rec.body.Bytes(), Trailer: storedHeader(rec.trailer(), hop)}
}
