// Command sentinel operates Sentinel: it finds and resolves uncertain
// executions, follows their events live, lists and takes leases, shows and
// joins elections, inspects, follows, resets and takes fair-queue turns,
// and migrates the schema.
//
// Connection: --database-url, else $DATABASE_URL, else the libpq
// environment variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
// PGSSLMODE, ...); a connection attempt waits 10s at most unless they
// set connect_timeout (PGCONNECT_TIMEOUT). Global flags (--database-url, --namespace, --schema,
// --json) may stand before or after the command name.
//
// Exit codes:
//
//	0  success
//	1  error (database unreachable, unexpected failure, lease lost)
//	2  usage: unknown command or flag, wrong arguments, invalid input
//	3  not found: the key has no execution or lease, the group no leader
//	4  refused or wrong state: a destructive command without confirmation,
//	   a key not in the state the command needs, a value that does not
//	   match the key's declared result type, a lease held elsewhere,
//	   a busy queue (queue reset), a wait past --timeout, an interrupt
//	   while waiting (lock, elect, queue lock: nothing ran), pending
//	   migrations (migrate status), migrate on libpq's default database
//	   without a terminal or --yes
//	5  needs an operator (status --exit-code only): an uncertain
//	   execution, a completed one whose result was not stored, one
//	   rerun pending for longer than --rerun-pending-after, or one
//	   reconciling for longer than --reconciling-after
//
// `sentinel lock KEY -- CMD`, `sentinel elect GROUP -- CMD` and
// `sentinel queue lock RESOURCE... -- CMD` exit with CMD's exit code
// instead. CMD runs in a process group of its own under a supervising
// process (guard_unix.go): the whole group stops before the lock can pass
// to another holder, even when sentinel is SIGKILLed (Linux: parent-death
// signal; other Unix: best effort, the control pipe's end of file).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
	"github.com/sentinel-coordination/sentinel/internal/shell"
)

// Exit codes; see the package documentation.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitRefused  = 4
	// exitAttention: status --exit-code found what needs an operator.
	exitAttention = 5
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), interruptSignals()...)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// interruptSignals end a command as Ctrl-C does (lock, elect and queue
// lock: the command's tree gets SIGTERM and its grace, then the release):
// SIGINT, SIGTERM, and SIGHUP (its terminal closed) unless it is ignored
// (nohup: the command goes on, and so does sentinel).
func interruptSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// app is the state shared by every command: global flags and, once a
// command runs, the connection.
type app struct {
	databaseURL string
	namespace   string
	schema      string
	jsonOut     bool
	verbose     bool
	operator    string

	stdin          io.Reader
	stdinLines     *bufio.Reader // stdin read by lines: answers, values (see input)
	stdout, stderr io.Writer
	ran            bool     // a command's RunE started: errors before it are usage errors
	argv           []string // the command line as given, less the program name

	pool   *pgxpool.Pool
	client *sentinel.Client
	target string // where the command looks: database, host, user, schema; set by connect
}

// codeError carries an explicit exit code (a child's, or a refusal).
type codeError struct {
	code  int
	err   error // may be nil: nothing to print
	usage bool  // a usage error (usageErr, a flag's): run names the command's help
}

func (e *codeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *codeError) Unwrap() error { return e.err }

// usageErr is a usage error (exit 2) of the command line: run follows its
// message with the command's help, as for a flag the parser refused.
func usageErr(format string, args ...any) error {
	return &codeError{code: exitUsage, err: fmt.Errorf(format, args...), usage: true}
}

func refused(format string, args ...any) error {
	return &codeError{code: exitRefused, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ee *codeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, sentinel.ErrNotFound), errors.Is(err, sentinel.ErrNoLeader):
		return exitNotFound
	case errors.Is(err, sentinel.ErrWrongState), errors.Is(err, sentinel.ErrNotAcquired), errors.Is(err, sentinel.ErrQueueBusy),
		errors.Is(err, sentinel.ErrResultType):
		return exitRefused
	case errors.Is(err, sentinel.ErrInvalid):
		return exitUsage
	}
	return exitError
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, argv: args}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var elsewhere string
	if errors.Is(err, sentinel.ErrNotMigrated) {
		elsewhere = a.schemasElsewhere(ctx, cmd)
	}
	var msg string
	if err != nil {
		msg = tableTimes(err, err.Error()) // before close: relative may read the database clock
	}
	a.close()
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if !a.ran && code == exitError {
		code = exitUsage // cobra's own errors: unknown command, bad flag, wrong arguments
	}
	var ee *codeError
	if !errors.As(err, &ee) || ee.err != nil {
		fprintLines(stderr, "sentinel:", innerPrefixes(trimPrefix(msg)))
		if code == exitUsage && (!a.ran || ee != nil && ee.usage) {
			// The help of the command the error is in (cmd: the root for
			// an unknown command), unless the message named it already:
			// for cobra's errors and the flag parser's (before RunE), and
			// the command's own checks of its command line (usageErr),
			// not for a child's exit code 2 (lock -- CMD).
			help := "sentinel --help"
			if cmd != nil {
				help = cmd.CommandPath() + " --help"
			}
			if !strings.Contains(msg, "'"+help+"'") {
				fprintf(stderr, "Run '%s' for usage.\n", help)
			}
		}
		if errors.Is(err, sentinel.ErrNotMigrated) {
			for _, line := range strings.Split(elsewhere, "\n") {
				if line != "" {
					fprintln(stderr, line)
				}
			}
			if elsewhere != "" {
				// The tables are elsewhere: the schema named is far more
				// likely a slip than a new installation, and migrating it
				// at 3 a.m. makes an empty one beside the real one.
				fmt.Fprintf(stderr, "Only if schema %q is meant to be a new, empty installation beside those, create its tables "+
					"(nothing moves from the others):\n  %s\n", a.schema, a.command("migrate"))
			} else {
				fmt.Fprintf(stderr, "Check --schema (it is %q); if it is right, create the tables:\n  %s\n", a.schema, a.command("migrate"))
			}
		}
	}
	return code
}

// fprintLines prints msg, an error's text, after prefix, line by line: a
// message may end with a command to run, on a line of its own; each line
// is escaped (see esc).
func fprintLines(w io.Writer, prefix, msg string) {
	for i, line := range strings.Split(msg, "\n") {
		// A line's leading tabs are an indent (pgx lists each address it
		// tried so), shown as one; esc would print \t.
		if t := strings.TrimLeft(line, "\t"); i > 0 && len(t) < len(line) {
			line = strings.Repeat("  ", len(line)-len(t)) + t
		}
		if i == 0 {
			fprintln(w, prefix, line)
		} else {
			fprintln(w, line)
		}
	}
}

// innerPrefixes drops the library's "sentinel: " prefix where a wrapped
// error repeats it after a colon (`execution "k": sentinel: not found`),
// outside the double-quoted strings that name keys and the like, which
// are printed as they are.
func innerPrefixes(s string) string {
	const p = ": sentinel: "
	var b strings.Builder
	quoted, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && strings.HasPrefix(s[i:], p):
			b.WriteString(": ")
			i += len(p) - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// tableTimes rewrites, in msg (the text of err), each time that err's
// typed errors carry (anywhere in its chain: the holder's expiry of a
// HeldError, the lease expiry of an ExecutionError) from the library's
// RFC 3339 (2026-11-29T03:14:49.302345Z) to the wording of the command's
// tables, with how far it is from now on the database clock
// (2026-11-29 03:14:49.302Z (in 4m59s)). The library's texts stay as they
// are; only what the command prints changes.
func tableTimes(err error, msg string) string {
	var times []time.Time
	walkErrors(err, func(e error) {
		switch e := e.(type) {
		case *sentinel.HeldError:
			if e.Holder != nil {
				times = append(times, e.Holder.ExpiresAt)
			}
		case *sentinel.ExecutionError:
			times = append(times, e.LeaseExpiresAt)
		}
	})
	for _, t := range times {
		if !t.IsZero() {
			msg = strings.ReplaceAll(msg, t.UTC().Format(time.RFC3339Nano), ts(t)+" ("+relative(t)+")")
		}
	}
	return msg
}

// walkErrors calls fn with err and every error it wraps, depth first.
func walkErrors(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, fn)
		}
	}
}

// trimPrefix drops the library's "sentinel: " prefix, which the command
// prints once itself.
func trimPrefix(s string) string {
	const p = "sentinel: "
	for len(s) >= len(p) && s[:len(p)] == p {
		s = s[len(p):]
	}
	return s
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sentinel",
		Short: "Operate Sentinel: executions, leases, elections, queues, migrations",
		Long: `sentinel inspects and repairs what Sentinel coordinates in PostgreSQL.

Connection: --database-url, else $DATABASE_URL, else the libpq variables
(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...).
A connection attempt waits 10s at most unless they set connect_timeout
(PGCONNECT_TIMEOUT).
Global flags may stand before or after the command name.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found (also: no leader),
4 refused or wrong state (also: a value that does not match the key's
declared result type, a busy queue for 'queue reset', pending
migrations for 'migrate status', an interrupt while waiting for lock, elect
and queue lock), 5 needs an operator ('status --exit-code': uncertain, result
not stored, rerun pending too long, reconciling too long). lock, elect and
queue lock with a command exit with the command's code; the command and
everything it starts stop before the lock passes on (Linux: even when
sentinel is SIGKILLed; see 'sentinel lock --help').`,
		Example: `  # find uncertain executions and resolve one
  sentinel inspect payment-order-789 --namespace payments
  sentinel reconcile payment-order-789 --namespace payments --yes
  sentinel force-complete payment-order-789 '{"PaymentID":"pay_123"}' --namespace payments --yes

  # what needs attention, in every namespace
  sentinel status
  sentinel status --exit-code >/dev/null || page-on-call   # exit 5: needs an operator
  sentinel list --uncertain

  # run a command while holding a lease, while leading, on a turn
  sentinel lock nightly-report -- ./report.sh
  sentinel elect scheduler -- ./scheduler
  sentinel queue lock printer -- lp report.pdf`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL connection URL (default $DATABASE_URL, else the PG* variables)")
	pf.StringVarP(&a.namespace, "namespace", "n", "default", "namespace of the keys (status, list and idempotency list cover every namespace unless it is given)")
	pf.StringVar(&a.schema, "schema", "sentinel", "PostgreSQL schema holding Sentinel's tables")
	pf.BoolVar(&a.jsonOut, "json", false, "print JSON instead of tables (read commands; reconcile, force-complete, set-result and reset print the execution after the change)")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "log the client's diagnostics to stderr (without it, only that it is retrying while the database is unreachable)")
	pf.StringVar(&a.operator, "operator", "", "who is acting, recorded as the owner in history and lease rows as NAME/sentinel-PID (default $USER@hostname)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if h := dashNameHint(c); h != "" && strings.Contains(err.Error(), "unknown") {
			// lock k1 ls -l: a command's flag, the command given without
			// --; lock -k, queue lock -r: a name taken for a flag.
			names := dashNames[c.CommandPath()]
			if names == "RESOURCE" {
				names += "..."
			}
			err = fmt.Errorf("%w; a command to run goes after --: %s %s -- CMD [ARGS...]; %s", err, c.CommandPath(), names, h)
		} else if line, word := a.dashWordLine(c, err); line != "" {
			err = fmt.Errorf("%w\nif %s is %s (one that starts with -), it goes after --:\n  %s", err, shell.Quote(word), positionalOf(c), line)
		}
		return &codeError{code: exitUsage, err: err, usage: true}
	})

	root.AddCommand(
		a.migrateCmd(),
		a.statusCmd(),
		a.listCmd(),
		a.inspectCmd(),
		a.historyCmd(),
		a.reconcileCmd(),
		a.forceCompleteCmd(),
		a.resetCmd(),
		a.setResultCmd(),
		a.pruneCmd(),
		a.followCmd(),
		a.leasesCmd(),
		a.lockCmd(),
		a.leaderCmd(),
		a.membersCmd(),
		a.electionsCmd(),
		a.electCmd(),
		a.observeCmd(),
		a.queueCmd(),
		a.serveCmd(),
		a.idempotencyCmd(),
	)
	return root
}

// dashWordLine answers cobra's refusal err of a word that starts with a
// single "-" and is no flag of c ("unknown shorthand flag: 'd' in
// -dash-key"), for a command that takes a KEY, GROUP, VALUE or RESOURCE:
// an operator who typed a key as list shows it. It returns the command
// line as given with that word moved after "--" (where it is taken as
// is), runnable as printed, and the word; "" when err is another
// refusal. The connection (--database-url) is left out, as in every
// printed line.
func (a *app) dashWordLine(c *cobra.Command, err error) (line, word string) {
	_, rest, ok := strings.Cut(err.Error(), "unknown shorthand flag: ")
	if !ok || positionalOf(c) == "" || slices.Contains(a.argv, "--") {
		return "", ""
	}
	_, rest, ok = strings.Cut(rest, " in -")
	if !ok {
		return "", ""
	}
	// pflag names what was left of the word when it failed ("-yes" with
	// a -y flag: "in -es"): the word is the first that ends with it.
	at := slices.IndexFunc(a.argv, func(w string) bool {
		return strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && strings.HasSuffix(w, rest)
	})
	if at < 0 {
		return "", ""
	}
	word = a.argv[at]
	words := []string{"sentinel"}
	for i := 0; i < len(a.argv); i++ {
		switch w := a.argv[i]; {
		case i == at:
		case w == "--database-url":
			i++
		case strings.HasPrefix(w, "--database-url="):
		default:
			words = append(words, shell.Quote(w))
		}
	}
	return strings.Join(append(words, "--", shell.Quote(word)), " "), word
}

// positionalOf names c's positional words (KEY, GROUP, KEY [VALUE]...)
// as its usage line has them: "the KEY", or "" when it takes none.
func positionalOf(c *cobra.Command) string {
	var names []string
	for _, w := range strings.Fields(c.Use)[1:] {
		w = strings.Trim(w, "[].")
		if w != "" && w == strings.ToUpper(w) && w[0] >= 'A' && w[0] <= 'Z' {
			names = append(names, w)
		} else {
			break
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "the " + strings.Join(names, " or the ")
}

// runE wraps a command body: it marks that arguments parsed, and connects
// first unless the command connects itself.
func (a *app) runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return a.runEChecked(nil, fn)
}

// runEChecked is runE with check run first, before the connection: a
// command line check refuses is refused with the database down or its
// settings broken, at once, and nothing names a database the command
// never acted on.
func (a *app) runEChecked(check, fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		if err := a.checkSelectors(cmd); err != nil {
			return err
		}
		if err := a.checkNamesFirst(cmd, args); err != nil {
			return err
		}
		if check != nil {
			if err := check(cmd, args); err != nil {
				return err
			}
		}
		if err := a.connect(cmd.Context()); err != nil {
			return err
		}
		if showsTarget[cmd.CommandPath()] && !a.jsonOut {
			fprintf(a.stderr, "sentinel: %s, %s (%s)\n", a.target, a.namespaceText(cmd), a.source())
		}
		if _, ok := dashNames[cmd.CommandPath()]; ok {
			defer quitIsInterrupt(cmd)()
		}
		err := fn(cmd, args)
		err = a.tokenMoved(cmd, err)
		var said *noLeaderError // leader's own: where else, already said
		if lk, ok := keyCommands[cmd.CommandPath()]; ok && len(args) > 0 && !errors.As(err, &said) &&
			(errors.Is(err, sentinel.ErrNotFound) || errors.Is(err, sentinel.ErrNoLeader)) {
			err = a.elsewhere(cmd, lk, args[0], err)
		}
		return err
	}
}

// tokenMoved adds to err, a refusal of a step on an execution because
// --token no longer matches (the key moved on: another operator, a
// worker's re-run), the inspect command line for the key, to look at it
// again before acting: the library's text says "Inspect it again", a
// method of its own.
func (a *app) tokenMoved(cmd *cobra.Command, err error) error {
	var ee *sentinel.ExecutionError
	f := cmd.Flags().Lookup("token")
	if f == nil || !f.Changed || keyCommands[cmd.CommandPath()].table != "executions" || !errors.Is(err, sentinel.ErrWrongState) ||
		!errors.As(err, &ee) || strconv.FormatInt(ee.Token, 10) == f.Value.String() {
		return err
	}
	return fmt.Errorf("%w\nthe key is at token %d now, not %s: look at it again before acting:\n  %s",
		err, ee.Token, f.Value.String(), a.keyCommand("inspect", []string{ee.Key}, "-n", ee.Namespace))
}

// checkSelectors refuses an empty --namespace or --schema given on the
// command line (a script's `-n "$NS"` with NS unset): the library takes
// "" for the default namespace and schema, so the command would act on
// "default" or "sentinel" while its messages named "", and a listing
// would read one namespace and call it every namespace. It refuses
// --namespace with --all-namespaces too, for every command that has both.
func (a *app) checkSelectors(cmd *cobra.Command) error {
	if cmd.Flags().Changed("namespace") && a.namespace == "" {
		return usageErr("--namespace is empty: name a namespace, or leave -n out (status, list and idempotency list then cover every namespace; other commands act on %q)", "default")
	}
	if cmd.Flags().Changed("schema") && a.schema == "" {
		return usageErr("--schema is empty: name the schema that holds Sentinel's tables, or leave --schema out for %q", "sentinel")
	}
	if f := cmd.Flags().Lookup("all-namespaces"); f != nil && f.Value.String() == "true" && cmd.Flags().Changed("namespace") {
		return usageErr("give --namespace or --all-namespaces, not both")
	}
	return nil
}

// showsTarget lists the commands whose human output starts by naming where
// they look (on stderr): status, the lists and every command that changes
// something.
var showsTarget = map[string]bool{
	"sentinel status": true, "sentinel migrate": true, "sentinel migrate status": true,
	"sentinel reconcile": true, "sentinel force-complete": true, "sentinel reset": true,
	"sentinel set-result": true, "sentinel prune": true, "sentinel queue reset": true,
	"sentinel lock": true, "sentinel elect": true, "sentinel queue lock": true,
	"sentinel idempotency resolve": true, "sentinel list": true, "sentinel idempotency list": true,
	"sentinel leases": true, "sentinel elections": true, "sentinel queue status": true,
}

// listsEvery lists the commands that cover every namespace unless
// --namespace is given: those that look for what needs an operator.
var listsEvery = map[string]bool{"sentinel status": true, "sentinel list": true, "sentinel idempotency list": true}

// namespaceText names the namespaces cmd acts on.
func (a *app) namespaceText(cmd *cobra.Command) string {
	all := false
	if f := cmd.Flags().Lookup("all-namespaces"); f != nil {
		all = f.Value.String() == "true" || (listsEvery[cmd.CommandPath()] && !cmd.Flags().Changed("namespace"))
	}
	if all {
		return "every namespace"
	}
	return fmt.Sprintf("namespace %q", a.namespace)
}

// command is a sentinel command line for a person to run: the words
// quoted for a POSIX shell where needed, then --schema when it is not the
// default, so that it runs as printed given the database connection (key
// commands name their namespace among the words).
func (a *app) command(words ...string) string {
	var b strings.Builder
	b.WriteString("sentinel")
	for _, w := range words {
		b.WriteString(" " + shell.Quote(w))
	}
	b.WriteString(a.schemaFlag())
	return b.String()
}

// keyCommand is the command line of sub for the positional words args (a
// key, a value) with flags, for a person to run (see command): a word that
// reads as a flag (a key "-x", a value -5) goes after "--", with the other
// positional words, every flag before it; otherwise the words come first,
// as an operator types them.
func (a *app) keyCommand(sub string, args []string, flags ...string) string {
	if !slices.ContainsFunc(args, func(w string) bool { return strings.HasPrefix(w, "-") }) {
		return a.command(append(append([]string{sub}, args...), flags...)...)
	}
	line := a.command(append([]string{sub}, flags...)...) + " --"
	for _, w := range args {
		line += " " + shell.Quote(w)
	}
	return line
}

// again is the command line that runs cmd again as given (its arguments
// and the flags set, but the connection), with --name set to value: for
// "the next page" hints. A command after "--" (lock, elect, queue lock)
// stays after it, every flag before it.
func (a *app) again(cmd *cobra.Command, name, value string) string {
	return a.againWith(cmd, []string{name}, "--"+name, value)
}

// againEvery is the command line that runs cmd again as given for every
// namespace (--all-namespaces instead of --namespace): for the listings of
// one namespace that found nothing there.
func (a *app) againEvery(cmd *cobra.Command) string {
	return a.againWith(cmd, []string{"namespace", "all-namespaces"}, "--all-namespaces")
}

// againWith is again, leaving out the flags named in drop and adding the
// words add after the others. Secrets are never reprinted: the connection
// (--database-url) and serve's --operator-token (the printed serve then
// takes $SENTINEL_OPERATOR_TOKEN, or says how to give a token).
func (a *app) againWith(cmd *cobra.Command, drop []string, add ...string) string {
	args := cmd.Flags().Args()
	var tail []string
	d := cmd.ArgsLenAtDash()
	if d >= 0 {
		args, tail = args[:d], args[d:]
	}
	return a.againSplit(cmd, args, tail, d >= 0, drop, add...)
}

// againSplit is againWith with the positional words given: args before
// the flags, and when dash, "--" and tail after them.
func (a *app) againSplit(cmd *cobra.Command, args, tail []string, dash bool, drop []string, add ...string) string {
	words := strings.Fields(strings.TrimPrefix(cmd.CommandPath(), "sentinel"))
	words = append(words, args...)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name == "database-url" || f.Name == "operator-token" || f.Name == "schema" || slices.Contains(drop, f.Name) {
			return
		}
		switch v := f.Value.(type) {
		case pflag.SliceValue:
			for _, s := range v.GetSlice() {
				words = append(words, "--"+f.Name, s)
			}
		default:
			switch {
			case f.Value.Type() == "bool" && f.Value.String() == "true":
				words = append(words, "--"+f.Name)
			case f.Value.Type() == "bool":
				words = append(words, "--"+f.Name+"="+f.Value.String())
			case f.Value.Type() == "duration":
				v, _ := cmd.Flags().GetDuration(f.Name)
				words = append(words, "--"+f.Name, durationArg(v))
			default:
				words = append(words, "--"+f.Name, f.Value.String())
			}
		}
	})
	line := a.command(append(words, add...)...)
	if dash {
		line += " --"
		for _, w := range tail {
			line += " " + shell.Quote(w)
		}
	}
	return line
}

// durationArg is d as a printed command carries it: as an operator
// types it (10m, 1h30m, 1m30s, 500ms), time.Duration.String without its
// zero units (10m0s, 1h0m0s), which time.ParseDuration reads back as d.
// Every duration that goes into a command line for a person to run goes
// through it.
func durationArg(d time.Duration) string { return reltime.Duration(d) }

// schemaFlag is " --schema S" when the schema is not the default, else "".
func (a *app) schemaFlag() string {
	if a.schema == "" || a.schema == "sentinel" {
		return ""
	}
	return " --schema " + shell.Quote(a.schema)
}

// idemCommand is a `sentinel idempotency` command line for the client's
// key in scope and namespace ns (see idempotency.Command), then extra
// words.
func (a *app) idemCommand(sub, key, scope, ns string, extra ...string) string {
	if strings.HasPrefix(key, "-") {
		// The key goes last, after "--" (idempotency.Command), and the
		// extra flags before it.
		for _, w := range extra {
			sub += " " + shell.Quote(w)
		}
		return idempotency.Command(sub, key, scope, ns, a.schema)
	}
	s := idempotency.Command(sub, key, scope, ns, "")
	for _, w := range extra {
		s += " " + shell.Quote(w)
	}
	return s + a.schemaFlag()
}

// source says where the connection settings came from.
func (a *app) source() string {
	switch {
	case a.databaseURL != "":
		return "from --database-url"
	case os.Getenv("DATABASE_URL") != "":
		return "from $DATABASE_URL"
	case a.fromDefaults():
		return "from libpq defaults: no --database-url, $DATABASE_URL, PGHOST, PGDATABASE or PGSERVICE"
	}
	return "from the PG* environment variables"
}

// fromDefaults reports whether nothing chose the database: no
// --database-url, $DATABASE_URL, PGHOST, PGDATABASE or PGSERVICE, so libpq's
// defaults apply (the local socket, a database named after the user).
func (a *app) fromDefaults() bool {
	if a.databaseURL != "" {
		return false
	}
	for _, v := range []string{"DATABASE_URL", "PGHOST", "PGDATABASE", "PGSERVICE"} {
		if os.Getenv(v) != "" {
			return false
		}
	}
	return true
}

// args checks the number of positional arguments as a usage error.
func args(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || (max >= 0 && len(args) > max) {
			want := fmt.Sprintf("%d", min)
			switch {
			case max < 0:
				want = fmt.Sprintf("at least %d", min)
			case max != min:
				want = fmt.Sprintf("%d to %d", min, max)
			}
			return usageErr("%s: want %s argument(s), got %d (see '%s --help')", cmd.CommandPath(), want, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// connect opens the pool and the client.
func (a *app) connect(ctx context.Context) error {
	url := a.databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	// An empty string makes pgx read the libpq PG* variables.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return usageErr("bad connection string: %w", err)
	}
	cfg.MaxConns = 4
	cc := cfg.ConnConfig
	if cc.ConnectTimeout <= 0 {
		// Neither connect_timeout nor PGCONNECT_TIMEOUT: pgxpool would
		// wait two minutes for a server that does not answer.
		cc.ConnectTimeout = defaultConnectTimeout
	}
	host := cc.Host
	if strings.HasPrefix(host, "/") {
		host = "socket " + host
	} else {
		host = fmt.Sprintf("%s:%d", host, cc.Port)
	}
	a.target = fmt.Sprintf("database %q on %s as %q, schema %q", cc.Database, host, cc.User, a.schema)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if a.operator == "" {
		a.operator = defaultOperator()
	}
	logger := slog.New(newRetryNotes(a.stderr))
	if a.verbose {
		logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	client, err := sentinel.New(pool, &sentinel.Config{
		Schema:    a.schema,
		Namespace: a.namespace,
		Owner:     a.owner(),
		Logger:    logger,
	})
	if err != nil {
		pool.Close()
		return err
	}
	a.pool, a.client = pool, client
	clockRead = func() time.Duration { return readClockSkew(pool) }
	return nil
}

// defaultConnectTimeout bounds a connection attempt when the connection
// settings set none (connect_timeout, PGCONNECT_TIMEOUT): an operator
// learns at once that the database does not answer, and the commands
// that wait while it is unreachable (lock, elect, follow) retry sooner.
const defaultConnectTimeout = 10 * time.Second

// reachable returns nil when the database answers, else an error saying
// what to do: a command that reads it several times (status: the schema
// shown, the others of the database) fails on one connection attempt,
// not one per read, each with its own timeout.
func (a *app) reachable(ctx context.Context) error {
	err := a.pool.Ping(ctx)
	var pgErr *pgconn.PgError
	if err == nil || ctx.Err() != nil || errors.As(err, &pgErr) {
		return err // reached: the server's own refusal (password, database) says why
	}
	how := "check that PostgreSQL is up and that the connection settings (" + a.source() + ") name it"
	if errors.Is(err, context.DeadlineExceeded) {
		how = fmt.Sprintf("no answer within %s (connect_timeout); %s, or set a longer connect_timeout=SECONDS in the connection string",
			a.pool.Config().ConnConfig.ConnectTimeout, how)
	}
	return fmt.Errorf("cannot reach the database: %s: %w", how, err)
}

// defaultOperator is user@host: $USER, else $LOGNAME, else the account
// running the command; and the hostname.
func defaultOperator() string {
	u := os.Getenv("USER")
	if u == "" {
		u = os.Getenv("LOGNAME")
	}
	if cur, err := user.Current(); u == "" && err == nil {
		u = cur.Username
	}
	if u == "" {
		u = "unknown"
	}
	host, _ := os.Hostname()
	return u + "@" + host
}

func (a *app) close() {
	if a.client != nil {
		a.client.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
}

// typedDuration is a duration flag whose default --help prints as an
// operator types it (15m, 1h; durationArg), not in Go's form (15m0s,
// 1h0m0s). Its type is "duration", so it reads as pflag's own does
// (GetDuration, againSplit).
type typedDuration struct{ d *time.Duration }

func (v typedDuration) String() string {
	if v.d == nil {
		return ""
	}
	return durationArg(*v.d)
}

func (v typedDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (v typedDuration) Type() string { return "duration" }

// durationFlag defines a duration flag with a default that is not 0,
// shown in --help as typed (typedDuration).
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(typedDuration{p}, name, usage)
}
