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
// Pages are rendered on the server (html/template, every key, label and
// value escaped) and readable without JavaScript. With JavaScript on, a
// small script (served by the handler, no build step) follows the execution
// events live over server-sent events (Client.Follow) and tells the
// operator when what they see has changed.
//
// Every action (reconcile, force-complete, reset to claimed) is a two-step
// form: a confirmation page shows what will happen, and the action is done
// only with the operator token (compared in constant time), a CSRF token
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
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// Options configure a console. The zero value is a console that offers no
// action (ReadOnly must then be set: New refuses actions without a token).
type Options struct {
	// OperatorToken must be given with every action. Required unless
	// ReadOnly. Compared in constant time. Give it from a secret store or
	// an environment variable, never in a URL.
	OperatorToken string

	// ReadOnly shows everything and offers and accepts no action.
	ReadOnly bool

	// Operator returns the name recorded in a key's history for an action
	// (metadata "operator_name"). Default: the name the operator types in
	// the confirmation form. Set it when your authentication knows who is
	// acting (for example from a header your proxy sets).
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

	// PollInterval is passed to Client.Follow for the live view. Default:
	// Follow's default (200ms).
	PollInterval time.Duration

	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
}

// view is a read-only page beside the executions (leases, queues,
// elections), each in a file of its own, listed in the navigation.
type view struct {
	path, label string
	order       int
	handler     func(*Console) http.HandlerFunc
}

var views []view

func addView(v view) {
	views = append(views, v)
	sort.Slice(views, func(i, j int) bool { return views[i].order < views[j].order })
}

// Console is the reconciliation page. It implements http.Handler.
type Console struct {
	c     *sentinel.Client
	opts  Options
	token [32]byte // sha256 of the operator token
	key   []byte
	mux   *http.ServeMux
	tmpl  *template.Template
	now   func() time.Time
}

//go:embed templates/*.html static/*
var files embed.FS

// New returns the console for client.
func New(client *sentinel.Client, opts Options) (*Console, error) {
	if client == nil {
		return nil, errors.New("console: client must not be nil")
	}
	if !opts.ReadOnly && opts.OperatorToken == "" {
		return nil, errors.New("console: an OperatorToken is required unless ReadOnly is set")
	}
	if opts.Title == "" {
		opts.Title = "Sentinel"
	}
	if opts.CSRFMaxAge == 0 {
		opts.CSRFMaxAge = 30 * time.Minute
	}
	if opts.CSRFMaxAge < 0 {
		return nil, errors.New("console: CSRFMaxAge must not be negative")
	}
	if opts.PageSize == 0 {
		opts.PageSize = 50
	}
	if opts.PageSize < 0 || opts.PageSize > sentinel.MaxExecutionsLimit {
		return nil, fmt.Errorf("console: PageSize must be 1..%d", sentinel.MaxExecutionsLimit)
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
	cs := &Console{c: client, opts: opts, token: sha256.Sum256([]byte(opts.OperatorToken)), key: key, now: time.Now}
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
	mux.HandleFunc("GET /static/", cs.static)
	for _, v := range views {
		mux.HandleFunc("GET /"+v.path, v.handler(cs))
	}
	cs.mux = mux
	return cs, nil
}

// ServeHTTP serves the console. Every response carries a strict Content
// Security Policy: scripts and styles only from the console itself, no
// framing, forms posting only to it.
func (cs *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

// checkOperatorToken compares a submitted token with the configured one in
// constant time (over their SHA-256 digests, so the length leaks nothing
// either).
func (cs *Console) checkOperatorToken(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(sum[:], cs.token[:]) == 1
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

var errCSRF = errors.New("the form is not valid (expired, or not issued by this console): go back, reload the key's page and try again")

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
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		host := o
		if i := strings.Index(o, "://"); i >= 0 {
			host = o[i+3:]
		}
		return host == r.Host
	}
	return true
}

// ctxTimeout bounds the database work of one page.
func ctxTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 15*time.Second)
}
