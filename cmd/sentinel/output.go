package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSONLine writes v as one line of JSON (for streams: follow,
// observe).
func (a *app) printJSONLine(v any) error {
	return json.NewEncoder(a.stdout).Encode(v)
}

// table returns a tabwriter for human output; call Flush when done.
func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
}

// row writes tab-separated cells, each escaped (see esc), and a newline.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, esc(fmt.Sprint(c)))
	}
	fmt.Fprintln(w)
}

// esc makes a user-supplied string (a key, label, owner, namespace,
// result, an error quoting one) safe to print to a terminal: control
// characters (C0, DEL, C1: newlines, tabs, escape sequences), Unicode
// format characters (bidirectional overrides, zero-width) and line or
// paragraph separators are written as Go escapes (\n, \x1b, \u202e), and
// invalid UTF-8 bytes as \xNN, so no value can forge a line, a column or
// hide text. Other text, backslashes included, is unchanged; esc of an
// escaped string is the same string. --json output needs none of this.
func esc(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case needsEscape(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// escArgs escapes every string, error and Stringer among args (see esc).
func escArgs(args []any) []any {
	out := make([]any, len(args))
	for i, v := range args {
		switch v := v.(type) {
		case string:
			out[i] = esc(v)
		case []byte:
			out[i] = esc(string(v))
		case error:
			out[i] = esc(v.Error())
		case fmt.Stringer:
			out[i] = esc(v.String())
		default:
			out[i] = v
		}
	}
	return out
}

// fprintf is fmt.Fprintf for human output: every string argument is
// escaped (see esc). The format itself is the command's own text.
func fprintf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, format, escArgs(args)...)
}

// fprintln is fmt.Fprintln for human output, every argument escaped.
func fprintln(w io.Writer, args ...any) {
	fmt.Fprintln(w, escArgs(args)...)
}

// ts formats a database time for humans; zero is "-".
func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// tsJSON is a time for JSON: RFC 3339 in UTC, or null when zero.
func tsJSON(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// relative says how far t, a time on the database clock, is from now on
// that clock, for humans ("in 2.1s", "3m05s ago"), in the console's
// wording (internal/reltime).
func relative(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return reltime.Text(t, dbNow())
}

// The database clock, as the command's relative times and liveness need
// it: every time the library returns is the database's, and an
// operator's laptop may be seconds or minutes off (a live leader shown
// as expired "2s ago"). clockRead, set by connect, reads the database
// clock once, the first time dbNow is asked; localNow is the local
// clock (a test skews it).
var (
	localNow  = time.Now
	clockRead func() time.Duration
	clockOnce sync.Once
	clockSkew time.Duration // database clock minus local clock
)

// dbNow is now on the database clock: the local clock corrected by the
// skew read once (none when that read failed).
func dbNow() time.Time {
	clockOnce.Do(func() {
		if clockRead != nil {
			clockSkew = clockRead()
		}
	})
	return localNow().Add(clockSkew)
}

// readClockSkew reads the database clock on pool and returns how far it
// is ahead of the local clock (0 when the read fails), taking the round
// trip's midpoint as the moment it was read.
func readClockSkew(pool *pgxpool.Pool) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var db time.Time
	sent := localNow()
	if err := pool.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&db); err != nil {
		return 0
	}
	got := localNow()
	return db.Sub(sent.Add(got.Sub(sent) / 2))
}

// maxListLimit is the most rows Leases and Elections return in one call.
const maxListLimit = 100000

// oneMore is the limit to ask Leases or Elections for, one more than the
// rows shown (limit; 0 is the library's default, 1000), so that rows left
// out can be told (leftOut). A limit out of range is passed on for the
// library to refuse.
func oneMore(limit int) (ask, shown int) {
	if limit == 0 {
		limit = 1000
	}
	if limit < 0 || limit >= maxListLimit {
		return limit, limit
	}
	return limit + 1, limit
}

// checkListLimit refuses a --limit of leases or elections outside what
// Leases and Elections accept (0 is their default, 1000).
func checkListLimit(limit int) error {
	if limit < 0 || limit > maxListLimit {
		return usageErr("--limit %d: give 1 to %d (0: 1000)", limit, maxListLimit)
	}
	return nil
}

// checkCount refuses a negative --count (follow, observe, queue follow),
// which would otherwise follow until interrupted, as 0 does.
func checkCount(count int) error {
	if count < 0 {
		return usageErr("--count %d: give 0 (until interrupted) or more", count)
	}
	return nil
}

// leftOut says on stderr (with --json too: the array alone cannot say it)
// that a listing printed only its first shown rows of what, and how to
// see the others.
func (a *app) leftOut(shown int, what, how string) {
	fprintf(a.stderr, "more than %d %s: only the first %d are shown; %s (at most %d)\n", shown, what, shown, how, maxListLimit)
}

// addYes adds --yes to a destructive command.
func addYes(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do it without asking (required when stdin is not a terminal)")
}

// confirm asks on a terminal; without one it refuses unless yes was given.
func (a *app) confirm(yes bool, format string, args ...any) error {
	if yes {
		return nil
	}
	question := fmt.Sprintf(format, args...)
	if !isTerminal(a.stdin) {
		return refused("%s: refused; stdin is not a terminal, pass --yes to confirm", question)
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	answer, _ := a.input().ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return refused("%s: not confirmed", question)
}

// input is stdin, read through one buffer by every question and value
// the command reads, so that none loses what another read ahead.
func (a *app) input() *bufio.Reader {
	if a.stdinLines == nil {
		a.stdinLines = bufio.NewReader(a.stdin)
	}
	return a.stdinLines
}

// isTerminal reports whether r is a terminal (not a pipe, a file or
// /dev/null, which is a character device too).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// errEnough ends a stream (follow, queue follow, observe) after --count
// lines.
var errEnough = errors.New("enough lines printed")

// lineCounter counts a stream's lines against --count (0: no limit).
type lineCounter struct{ n, max int }

// printed counts a line and returns errEnough once max lines were printed.
func (c *lineCounter) printed() error {
	if c.n++; c.max > 0 && c.n >= c.max {
		return errEnough
	}
	return nil
}

// streamEnd maps the end of a stream to the command's result: --count
// reached or an interrupt is success.
func streamEnd(cmd *cobra.Command, err error) error {
	if errors.Is(err, errEnough) || (err != nil && cmd.Context().Err() != nil) {
		return nil
	}
	return err
}
