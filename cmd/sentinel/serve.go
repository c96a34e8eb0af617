package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

func (a *app) serveCmd() *cobra.Command {
	var (
		addr, token, tokenFile, operatorsFile string
		allowedHosts                          []string
		readOnly, anyAddr, newToken           bool
		// A rerun pending key whose lease ended longer ago needs an
		// operator (status --exit-code's threshold).
		rerunAfter time.Duration
		// A key reconciling for longer needs an operator (status
		// --exit-code's threshold).
		reconcilingAfter time.Duration
		opts             console.Options // set by the check, from the flags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the reconciliation page (console) until interrupted",
		Long: `serve runs the reconciliation page: executions with uncertain ones first,
a key's history and evidence, leases, queues and elections, and the
reconcile / force-complete / reset actions, each guarded by the token the
operator saw. The start page lists every namespace unless --namespace is
given; every page shows the uncertain count of every namespace at its top,
and names the other schemas of the database with uncertain executions. It listens on loopback by default; another address needs
--listen-any (put it behind your own authentication).

A key rerun pending (its executor stopped with re-runs left, WithRerun)
needs an operator once its lease ended more than --rerun-pending-after
(default 15m, as status --exit-code) ago: no caller with WithRerun came
back. The start page lists such keys under "Rerun pending, needs an
operator (for more than ...)", as sentinel list and inspect mark them, and
their page offers reconcile. A key reconciling (an operator began and has
not force-completed or reset it) needs an operator once it began more than
--reconciling-after (default 1h, as status --exit-code) ago: the start
page lists such keys under "Reconciling, needs an operator (for more than
...)", and shows them as "reconciling (needs an operator: for more than
...)", as sentinel list and inspect do. Give both the values status
--exit-code is given, so that the page lists what pages.

It answers only requests addressed to it: Host a loopback name (localhost,
127.0.0.1, [::1]), the address it listens on, or a name given with
--allowed-host; any other Host gets 421 Misdirected Request, so a web page
cannot reach it by pointing its own name at this machine (DNS rebinding).

Actions need an operator token that looks drawn at random and carries at
least 128 bits (hex, base32 or base64 of 16 random bytes or more):
--new-token prints one (32 bytes from the system's random source,
base64url) and exits. A weaker token, or one made of words, repeated
characters, sequences, keyboard walks or dates, is refused at start
(exit 2).
  --operators-file FILE      one line per operator, NAME:TOKEN: the history
                             names the operator whose token was given
  --operator-token-file FILE a token shared by the operators, who then type
                             their name (recorded as self-declared)
  $SENTINEL_OPERATOR_TOKEN   the same, from the environment
  --operator-token TOKEN     the same; visible to every user in ps: avoid
--read-only offers no action. Tokens are compared in constant time. It
prints the URL it listens on, and stops on SIGINT, SIGTERM or SIGHUP.`,
		Example: `  sentinel serve --new-token > token && chmod 600 token && sentinel serve --operator-token-file token
  SENTINEL_OPERATOR_TOKEN=$(sentinel serve --new-token) sentinel serve
  sentinel serve --operators-file /etc/sentinel/operators   # lines: ada:<token>
  sentinel serve --read-only --addr 127.0.0.1:8380 -n payments
  sentinel serve --read-only --rerun-pending-after 1h --reconciling-after 4h
  sentinel serve --listen-any --addr 0.0.0.0:8380 --allowed-host ops.example.com --operators-file ops.txt`,
		Args: args(0, 0),
		// Everything the flags decide is checked before the connection: a
		// bad --addr, token or file exits 2 even with the database down.
		RunE: a.runEChecked(func(cmd *cobra.Command, _ []string) error {
			if rerunAfter <= 0 {
				return usageErr("--rerun-pending-after %s: give a duration of more than 0 (such as 15m)", durationArg(rerunAfter))
			}
			if reconcilingAfter <= 0 {
				return usageErr("--reconciling-after %s: give a duration of more than 0 (such as 1h)", durationArg(reconcilingAfter))
			}
			opts = console.Options{ReadOnly: readOnly, AllowedHosts: allowedHosts, RerunPendingAfter: rerunAfter, ReconcilingAfter: reconcilingAfter}
			if cmd.Flags().Changed("namespace") {
				opts.Namespace = a.namespace // else the start page lists every namespace
			}
			stderr := cmd.ErrOrStderr()
			if token != "" {
				fprintln(stderr, "warning: --operator-token is visible to every user of this machine (ps, /proc); prefer $SENTINEL_OPERATOR_TOKEN, --operator-token-file or --operators-file")
			}
			if tokenFile != "" {
				if token != "" {
					return usageErr("give --operator-token or --operator-token-file, not both")
				}
				b, err := readSecretFile(tokenFile, stderr)
				if err != nil {
					return usageErr("--operator-token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return usageErr("--operator-token-file %s is empty: put a token in it (sentinel serve --new-token > %s)", tokenFile, tokenFile)
				}
			}
			if token == "" {
				token = os.Getenv("SENTINEL_OPERATOR_TOKEN")
			}
			opts.OperatorToken = token
			if operatorsFile != "" {
				ops, err := readOperators(operatorsFile, stderr)
				if err != nil {
					return usageErr("--operators-file: %w", err)
				}
				opts.Operators = ops
			}
			if !anyAddr && !console.IsLoopback(addr) {
				return usageErr("--addr %s is not a loopback address: pass --listen-any to serve it beyond this machine", addr)
			}
			if readOnly {
				opts.OperatorToken, opts.Operators = "", nil
			} else if opts.OperatorToken == "" && len(opts.Operators) == 0 {
				return usageErr("actions need an operator token: --operators-file, --operator-token-file or $SENTINEL_OPERATOR_TOKEN (make one with `sentinel serve --new-token`), or pass --read-only")
			}
			if err := console.CheckOptions(opts); err != nil { // a weak token (console.ErrWeakToken), a bad --allowed-host
				return usageErr("%w", err)
			}
			return nil
		}, func(cmd *cobra.Command, _ []string) error {
			stderr := cmd.ErrOrStderr()
			// A page on a schema with no tables would only show errors:
			// refuse at once, as every other command does (run names the
			// schemas that have them).
			st, err := a.client.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			if len(st.Applied) == 0 {
				return unmigratedError{schema: a.schema}
			}
			if !st.UpToDate() {
				fprintf(stderr, "warning: schema %q lacks %d migration(s) this build knows (the newest is %d): what needs them fails until %s\n",
					a.schema, len(st.Pending), st.Pending[len(st.Pending)-1].Version, a.command("migrate"))
			}
			// Other schemas holding what status --exit-code pages on, by
			// this console's thresholds.
			after := attentionAfter{rerunPending: rerunAfter, reconciling: reconcilingAfter}
			needsIn := func(ctx context.Context) (found, unread []string, more bool, err error) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				rows, unread, more, err := a.attentionInSchemas(ctx, after, maxSchemasShown)
				seen := map[string]bool{}
				for _, r := range rows {
					if !seen[r.Schema] {
						seen[r.Schema] = true
						found = append(found, r.Schema)
					}
				}
				return found, unread, more, err
			}
			found, _, _, err := needsIn(cmd.Context())
			if err != nil {
				fprintf(stderr, "sentinel: note: %v\n", err)
			}
			if len(found) > 0 {
				fprintf(stderr, "sentinel: note: keys that need an operator (uncertain, or what status --exit-code pages on) in other schemas of this database too: %s; this page shows only schema %q; the page for every namespace there:\n", quoteAll(found), a.schema)
				for _, line := range strings.Split(strings.TrimPrefix(a.schemaCommands(cmd, found, "namespace"), "\n"), "\n") {
					fprintln(stderr, line)
				}
			}
			// Every page names the other schemas holding keys that need an
			// operator (the note above reaches only whoever started serve,
			// once), and those it could not look in: "nothing needs an
			// operator" is then not read as the whole database's.
			opts.Elsewhere = func(ctx context.Context) ([]string, error) {
				found, unread, more, err := needsIn(ctx)
				if err != nil {
					return nil, err
				}
				var why []string
				if len(unread) > 0 {
					why = append(why, fmt.Sprintf("schemas %s hold Sentinel's tables but could not be read (an older version, or no privilege)", quoteAll(unread)))
				}
				if more {
					why = append(why, fmt.Sprintf("only the first %d other schemas holding Sentinel's tables were looked in; there are more", maxSchemasShown))
				}
				if len(why) > 0 {
					return found, errors.New(strings.Join(why, "; "))
				}
				return found, nil
			}
			h, err := console.New(a.client, opts)
			if err != nil { // checked before the connection (console.CheckOptions)
				return usageErr("%w", err)
			}
			return console.Serve(cmd.Context(), addr, h, func(l net.Addr) {
				fprintf(cmd.OutOrStdout(), "listening on http://%s/\n", l)
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", console.DefaultAddr, "address to listen on (loopback unless --listen-any)")
	f.StringArrayVar(&allowedHosts, "allowed-host", nil, "a name (host or host:port) the page answers for besides loopback names and the listen address; repeatable")
	f.StringVar(&operatorsFile, "operators-file", "", "file of NAME:TOKEN lines, one token per operator; the history names the token's operator")
	f.StringVar(&tokenFile, "operator-token-file", "", "file holding a token shared by the operators (default $SENTINEL_OPERATOR_TOKEN)")
	f.StringVar(&token, "operator-token", "", "a token shared by the operators (visible in ps: prefer $SENTINEL_OPERATOR_TOKEN or a file)")
	f.BoolVar(&readOnly, "read-only", false, "offer no action")
	f.BoolVar(&anyAddr, "listen-any", false, "allow a non-loopback --addr")
	durationFlag(f, &rerunAfter, "rerun-pending-after", defaultRerunPendingAfter, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: the start page lists it (status --exit-code's threshold)")
	durationFlag(f, &reconcilingAfter, "reconciling-after", defaultReconcilingAfter, "a key reconciling (since reconcile, on the database clock) longer than this needs an operator: the start page lists it (status --exit-code's threshold)")
	f.BoolVar(&newToken, "new-token", false, "print a new operator token (256 random bits) and exit")
	serve := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if newToken { // no database needed
			a.ran = true
			fprintln(cmd.OutOrStdout(), console.NewToken())
			return nil
		}
		return serve(cmd, args)
	}
	return cmd
}

// readSecretFile reads a file of secrets, warning when others may read it.
func readSecretFile(name string, warn io.Writer) ([]byte, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		fprintf(warn, "warning: %s is readable by other users (mode %v): chmod 600 %s\n", name, fi.Mode().Perm(), name)
	}
	return os.ReadFile(name)
}

// readOperators reads NAME:TOKEN lines; blank lines and lines starting
// with # are skipped.
func readOperators(name string, warn io.Writer) (map[string]string, error) {
	b, err := readSecretFile(name, warn)
	if err != nil {
		return nil, err
	}
	ops := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, tok, ok := strings.Cut(line, ":")
		op, tok = strings.TrimSpace(op), strings.TrimSpace(tok)
		if !ok || op == "" || tok == "" {
			return nil, fmt.Errorf("%s line %d: want NAME:TOKEN (for example ada:$(sentinel serve --new-token))", name, n)
		}
		if _, dup := ops[op]; dup {
			return nil, fmt.Errorf("%s line %d: operator %q is listed twice", name, n, op)
		}
		ops[op] = tok
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%s lists no operator: add NAME:TOKEN lines", name)
	}
	return ops, nil
}

// unmigratedError is serve's refusal of a schema with no Sentinel tables;
// it matches sentinel.ErrNotMigrated, so run names the schemas that have
// them.
type unmigratedError struct{ schema string }

func (e unmigratedError) Error() string {
	return fmt.Sprintf("serve: schema %q is not migrated (it has no Sentinel tables)", e.schema)
}

func (e unmigratedError) Unwrap() error { return sentinel.ErrNotMigrated }
