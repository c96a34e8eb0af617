// Package console is Sentinel's reconciliation page: an http.Handler that
// shows operators what needs them (uncertain executions first) and lets them
// resolve it safely.
//
// Mount it in your own server, behind your own authentication:
//
//	h, err := console.New(client, console.Options{
//		OperatorToken: os.Getenv("SENTINEL_OPERATOR_TOKEN"),
//	})
//	if err != nil { ... }
//	mux.Handle("/sentinel/", http.StripPrefix("/sentinel", h))
//
// or run it standalone with `sentinel serve` (loopback only by default).
//
// # Host check
//
// The console answers only requests whose Host header names it: a loopback
// name or address (localhost, 127.0.0.1, [::1], any port) or the
// unspecified address (0.0.0.0, [::]: what a listener on every interface
// prints), the address the connection was accepted on, or a name in
// Options.AllowedHosts. Any other Host gets 421 Misdirected Request.
// Without this, a web page the operator visits could point its own name at
// 127.0.0.1 (DNS rebinding) and read the
// console, stored results included, as a same-origin page. Mounted in your
// own server under a name of its own (ops.example.com), list that name:
//
//	console.Options{AllowedHosts: []string{"ops.example.com"}, ...}
//
// A reverse proxy that forwards with Host set to the console's own loopback
// address needs nothing; one that passes the public name on needs it
// listed. AnyHost turns the check off, for a server that checks Host
// itself.
//
// # Operators
//
// Options.Operators gives every operator a token of their own: the history
// of a key then names the operator whose token was given (metadata
// "operator_name", with "operator_auth": "token"), and no form field can
// change it. With the shared Options.OperatorToken the name is the one
// Options.Operator returns ("operator_auth": "application"), else the one
// typed in the form ("self-declared"). Every token must look drawn at
// random and carry at least MinTokenBits (128 bits): NewToken makes one
// (`sentinel serve --new-token` prints one).
//
// Pages are rendered on the server (html/template, every key, label and
// value escaped) and readable without JavaScript. With JavaScript on, a
// small script (served by the handler, no build step) follows the execution
// events live over server-sent events (Client.Follow) and tells the
// operator when what they see has changed; a row showing a key running is
// marked as a reload would (uncertain, handed back, rerun pending) once
// its lease expired, which writes no event.
//
// Every action (reconcile, force-complete, reset to claimed, and for an
// Idempotency-Key request resolve with a response) is a two-step
// form: a confirmation page shows what will happen, and the action is done
// only with an operator token (compared in constant time), a CSRF token
// bound to that very action, key and fencing token, and the operator's name,
// which is recorded in the key's history. The action is guarded by the
// fencing token the operator saw (sentinel.WithToken): if the key moved on
// meanwhile, it is refused and the page says why. With Options.ReadOnly no
// action is offered or accepted.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// DefaultRerunPendingAfter is Options.RerunPendingAfter's default, the
// default of sentinel status --exit-code's --rerun-pending-after.
const DefaultRerunPendingAfter = 15 * time.Minute

// DefaultReconcilingAfter is Options.ReconcilingAfter's default, the
// default of sentinel status --exit-code's --reconciling-after.
const DefaultReconcilingAfter = time.Hour

// Options configure a console. New refuses the zero value: set ReadOnly
// for a console that offers no action, or OperatorToken or Operators for
// one that does.
type Options struct {
	// OperatorToken is a token shared by the operators: given with an
	// action, it lets the action through, and the name recorded is
	// Operator's answer, else the one typed in the form (self-declared).
	// Operators names each operator from a token of their own instead. One
	// of the two is required unless ReadOnly. Compared in constant time;
	// at least MinTokenBits strong, else New returns ErrWeakToken. Give it
	// from a secret store, an environment variable or a file, never in a
	// URL or a command line.
	OperatorToken string

	// Operators maps each operator's name to their own token. An action
	// given one of these tokens is recorded as done by that name
	// (metadata "operator_name", "operator_auth": "token"); the form asks
	// no name, unless OperatorToken is set too: the form then asks one of
	// that shared token's users, and reads none with an operator's own.
	// Each token at least MinTokenBits strong, no two alike.
	Operators map[string]string

	// AllowedHosts lists the names (host or host:port, case-insensitive)
	// the console answers for besides loopback names and the address a
	// request arrived on; every other Host gets 421 Misdirected Request
	// (see the package documentation: DNS rebinding). An entry without a
	// port allows every port. AnyHost ("*") allows every Host: use it only
	// when something in front already checks it.
	AllowedHosts []string

	// Namespace is the namespace the lists (executions, leases, queues,
	// elections) show when the operator names none; each offers every
	// namespace with a box. Default: every namespace, each row naming its
	// own. Whatever it is, every page shows the uncertain count of every
	// namespace at its top.
	Namespace string

	// ReadOnly shows everything and offers and accepts no action.
	ReadOnly bool

	// Elsewhere, when set, returns the other schemas of the database that
	// hold keys needing an operator (uncertain executions, and what
	// sentinel status --exit-code pages on: results not stored, keys
	// rerun pending or reconciling for longer than the thresholds), which
	// this console (of its client's schema) does not list. It is called
	// as a page is rendered, at most once in a few seconds (its answer,
	// an error included, is kept that long for the pages rendered
	// meanwhile: sentinel serve's looks in every schema); the top of
	// every page then names them, each with the sentinel status command
	// that shows them, so that "nothing needs an operator" is not read as
	// the whole database's. An error is shown as such. sentinel serve
	// sets it, by the console's thresholds.
	Elsewhere func(ctx context.Context) ([]string, error)

	// Operator returns the name recorded in a key's history for an action
	// given the shared OperatorToken (metadata "operator_name",
	// "operator_auth": "application"). Default: the name the operator types
	// in the confirmation form ("self-declared"). Set it when your
	// authentication knows who is acting (for example from a header your
	// proxy sets). A token from Operators names its operator instead.
	Operator func(r *http.Request) string

	// Title is shown in every page's header. Default "Sentinel".
	Title string

	// CSRFKey signs the CSRF tokens of the confirmation forms. Default: a
	// random key made by New, so forms shown before a restart must be
	// reloaded. Set it (32 random bytes) when several instances serve the
	// console behind one address.
	CSRFKey []byte

	// CSRFMaxAge is how long a confirmation form stays valid. Default 30m.
	CSRFMaxAge time.Duration

	// PageSize is the number of executions per page. Default 50, at most
	// sentinel.MaxExecutionsLimit.
	PageSize int

	// RerunPendingAfter is how long a key may stay rerun pending (its
	// executor stopped with re-runs left, WithRerun, and no caller with
	// WithRerun came back to run it) after its lease ended, on the
	// database clock, before it needs an operator: the start page ("Needs
	// an operator") lists it, and its page offers Reconcile. Default 15m,
	// as sentinel status --exit-code's --rerun-pending-after.
	RerunPendingAfter time.Duration

	// ReconcilingAfter is how long a key may stay reconciling (an operator
	// began and has not force-completed or reset it; every caller gets
	// ErrReconciling meanwhile), since it entered reconciling, on the
	// database clock, before it needs an operator: the start page lists
	// it under "Reconciling, needs an operator (for more than D)", the
	// top of every page counts it, and its state reads "reconciling
	// (needs an operator: for more than D)", as sentinel list and inspect
	// show it. Default 1h, as sentinel status --exit-code's
	// --reconciling-after.
	ReconcilingAfter time.Duration

	// PollInterval is passed to Client.Follow for the live view. Default:
	// Follow's default (200ms).
	PollInterval time.Duration

	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
}

// view is a read-only page beside the executions, listed in the
// navigation; its handler is in a file of its own.
type view struct {
	path, label string
	handler     func(cs *Console, w http.ResponseWriter, r *http.Request)
}

// views is every view, in the navigation's order: the one table of them
// (a function, not a variable: the views' handlers render the navigation
// from it).
func views() []view {
	return []view{
		{path: "leases", label: "Leases", handler: (*Console).leases},          // leases.go
		{path: "queues", label: "Queues", handler: (*Console).queues},          // leases.go
		{path: "elections", label: "Elections", handler: (*Console).elections}, // elections.go
	}
}

// Console is the reconciliation page. It implements http.Handler.
type Console struct {
	c     *sentinel.Client
	opts  Options
	ops   []operator
	hosts hostPolicy
	key   []byte
	mux   *http.ServeMux
	tmpl  *template.Template
	now   func() time.Time
	// dbClock is the database clock's offset from now's, as last
	// measured (see measureDBClock).
	dbClock struct {
		sync.Mutex
		at     time.Time
		offset time.Duration
	}
	// elsewhere is Options.Elsewhere's last answer (see elsewhereNow).
	elsewhere struct {
		sync.Mutex
		at      time.Time
		schemas []string
		err     error
	}
}

//go:embed templates/*.html static/*
var files embed.FS

// CheckOptions returns the error New would return for opts, without a
// client: no OperatorToken or Operators unless ReadOnly, a weak token
// (ErrWeakToken), a bad operator name or AllowedHosts entry, a negative
// CSRFMaxAge, RerunPendingAfter or ReconcilingAfter, a PageSize out of range. A program (sentinel serve) checks
// its settings with it before it connects to the database.
func CheckOptions(opts Options) error {
	_, _, err := checkOptions(opts)
	return err
}

// checkOptions checks opts, returning the operators and the host policy
// they set.
func checkOptions(opts Options) ([]operator, hostPolicy, error) {
	if !opts.ReadOnly && opts.OperatorToken == "" && len(opts.Operators) == 0 {
		return nil, hostPolicy{}, errors.New("console: an OperatorToken or Operators are required unless ReadOnly is set")
	}
	ops, err := newOperators(opts.OperatorToken, opts.Operators)
	if err != nil {
		return nil, hostPolicy{}, err
	}
	hosts, err := newHostPolicy(opts.AllowedHosts)
	if err != nil {
		return nil, hostPolicy{}, err
	}
	if opts.CSRFMaxAge < 0 {
		return nil, hostPolicy{}, errors.New("console: CSRFMaxAge must not be negative")
	}
	if opts.RerunPendingAfter < 0 {
		return nil, hostPolicy{}, errors.New("console: RerunPendingAfter must not be negative")
	}
	if opts.ReconcilingAfter < 0 {
		return nil, hostPolicy{}, errors.New("console: ReconcilingAfter must not be negative")
	}
	if opts.PageSize < 0 || opts.PageSize > sentinel.MaxExecutionsLimit {
		return nil, hostPolicy{}, fmt.Errorf("console: PageSize must be 1..%d", sentinel.MaxExecutionsLimit)
	}
	return ops, hosts, nil
}

// New returns the console for client.
func New(client *sentinel.Client, opts Options) (*Console, error) {
	if client == nil {
		return nil, errors.New("console: client must not be nil")
	}
	ops, hosts, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	if opts.Title == "" {
		opts.Title = "Sentinel"
	}
	if opts.RerunPendingAfter == 0 {
		opts.RerunPendingAfter = DefaultRerunPendingAfter
	}
	if opts.ReconcilingAfter == 0 {
		opts.ReconcilingAfter = DefaultReconcilingAfter
	}
	if opts.CSRFMaxAge == 0 {
		opts.CSRFMaxAge = 30 * time.Minute
	}
	if opts.PageSize == 0 {
		opts.PageSize = 50
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	key := opts.CSRFKey
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("console: csrf key: %w", err)
		}
	}
	cs := &Console{c: client, opts: opts, ops: ops, hosts: hosts, key: key, now: time.Now}
	t, err := template.New("").Funcs(cs.funcs()).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	cs.tmpl = t
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", cs.executions)
	mux.HandleFunc("GET /key", cs.keyPage)
	mux.HandleFunc("GET /confirm", cs.confirm)
	mux.HandleFunc("POST /act", cs.act)
	mux.HandleFunc("GET /events", cs.events)
	mux.HandleFunc("GET /lease-state", cs.leaseStateJSON)
	mux.HandleFunc("GET /static/", cs.static)
	for _, v := range views() {
		mux.HandleFunc("GET /"+v.path, func(w http.ResponseWriter, r *http.Request) { v.handler(cs, w, r) })
	}
	cs.mux = mux
	return cs, nil
}

// ServeHTTP serves the console. A request for a host the console does not
// answer for gets 421 Misdirected Request (see Options.AllowedHosts). Every
// response carries a strict Content Security Policy: scripts and styles
// only from the console itself, no framing, forms posting only to it.
func (cs *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !cs.hosts.allowed(r.Host, local) {
		misdirected(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer") // keys travel in query strings
	h.Set("Cache-Control", "no-store")
	cs.mux.ServeHTTP(w, r)
}

func (cs *Console) static(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/static/")
	var ctype string
	switch name {
	case "console.css":
		ctype = "text/css; charset=utf-8"
	case "live.js":
		ctype = "text/javascript; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	b, err := files.ReadFile("static/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(b)
}

// csrfToken binds a confirmation form to one action on one key at one
// fencing token, and to the time it was issued: base64url(issued unix
// seconds, 8 bytes || HMAC-SHA256(key, issued || fields)[:16]).
func (cs *Console) csrfToken(issued time.Time, fields ...string) string {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(issued.Unix()))
	return base64.RawURLEncoding.EncodeToString(append(ts[:], cs.csrfMAC(ts[:], fields)...))
}

func (cs *Console) csrfMAC(ts []byte, fields []string) []byte {
	m := hmac.New(sha256.New, cs.key)
	m.Write(ts)
	for _, f := range fields {
		// Length-prefixed, so no two field lists write the same bytes.
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)[:16]
}

// errCSRF refuses a form that is not valid: expired, or not issued by this
// console (act shows it again, freshly issued).
var errCSRF = errors.New("console: the form is not valid (expired, or not issued by this console)")

func (cs *Console) checkCSRF(tok string, fields ...string) error {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 8+16 {
		return errCSRF
	}
	if !hmac.Equal(b[8:], cs.csrfMAC(b[:8], fields)) {
		return errCSRF
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0)
	if age := cs.now().Sub(issued); age > cs.opts.CSRFMaxAge || age < -time.Minute {
		return errCSRF
	}
	return nil
}

// sameOrigin rejects requests a browser marks as cross-site. It backs up
// the CSRF token; requests from tools that send neither header pass.
//
// Sec-Fetch-Site "same-origin" is the browser's own word (no page can set
// it) that the request comes from a page of the origin it is sent to: it
// is enough. Origin is compared with Host only without it (older
// browsers): behind a reverse proxy that forwards Host as the console's
// loopback address, Origin is the proxy's public name and never equals
// Host, and every action from the console's own page was refused.
//
// Origin equal to Host alone proves nothing under DNS rebinding: the
// attacker's page and its request share the attacker's name. It holds here
// because ServeHTTP has already refused every Host that is not the
// console's own (loopback, the listen address, AllowedHosts), so an Origin
// equal to an accepted Host is a page the console itself served.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		host := o
		if i := strings.Index(o, "://"); i >= 0 {
			host = o[i+3:]
		}
		return strings.EqualFold(host, r.Host)
	}
	return true
}

// ctxTimeout bounds the database work of one page.
func ctxTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 15*time.Second)
}
