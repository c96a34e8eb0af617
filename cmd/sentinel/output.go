package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
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

// row writes tab-separated cells and a newline.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
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

// relative says how far t is from now, for humans ("in 2.1s", "3m ago").
func relative(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Until(t)
	if d >= 0 {
		return "in " + round(d).String()
	}
	return round(-d).String() + " ago"
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	default:
		return d.Round(100 * time.Millisecond)
	}
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
	answer, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return refused("%s: not confirmed", question)
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
