package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
)

// badGroup is err, or when err is the library's refusal of the group
// (sentinel.InvalidError, Field "group") a usage error that names the
// GROUP the operator typed and says what a group may be.
func badGroup(err error, group string) error {
	var inv *sentinel.InvalidError
	if !errors.As(err, &inv) || inv.Field != "group" {
		return err
	}
	return usageErr("invalid GROUP %s: %s (a GROUP is 1 to %d bytes of UTF-8 text without NUL bytes)",
		argText(group), inv.Reason, sentinel.MaxKeyLen)
}

// argText quotes an argument for a message, its first 64 bytes when it is
// longer.
func argText(s string) string {
	const shown = 64
	if len(s) <= shown {
		return strconv.Quote(s)
	}
	return strconv.Quote(strings.ToValidUTF8(s[:shown], "")) + "..."
}

// electorJSON identifies an elector (a leader or a member) with --json.
type electorJSON struct {
	Namespace  string `json:"namespace"`
	Group      string `json:"group"`
	Owner      string `json:"owner"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	AppVersion string `json:"app_version"`
}

// leaderJSON is a group's leader as printed with --json.
type leaderJSON struct {
	electorJSON
	Term      int64   `json:"term"`
	ElectedAt *string `json:"elected_at"`
	ExpiresAt *string `json:"expires_at"`
}

func toLeaderJSON(l *sentinel.Leader) leaderJSON {
	return leaderJSON{electorJSON: electorJSON{l.Namespace, l.Group, l.Owner, l.Host, l.PID, l.AppVersion},
		Term: l.Term, ElectedAt: tsJSON(l.ElectedAt), ExpiresAt: tsJSON(l.ExpiresAt)}
}

// memberJSON is an elector as printed with --json.
type memberJSON struct {
	electorJSON
	Leader    bool    `json:"leader"`
	StartedAt *string `json:"started_at"`
	LastPoll  *string `json:"last_poll"`
	ExpiresAt *string `json:"expires_at"`
}

func (a *app) leaderCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "leader GROUP",
		Short: "Show the current leader of an election group",
		Long: `leader prints the leader of GROUP in --namespace: owner, host, pid, term (its
fencing token) and when its leadership expires unless renewed. Exit code 3
when the group has no leader (never elected, resigned, or expired by the
database clock); the error then gives the members command line for the
group when it is in --namespace, and names the other namespaces that have
a group of that name, each with the same command there.`,
		Example: `  sentinel leader scheduler -n billing
  sentinel leader scheduler --json`,
		Args: args(1, 1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			l, err := a.client.Leader(cmd.Context(), args[0])
			if errors.Is(err, sentinel.ErrNoLeader) {
				return a.noLeader(cmd, args[0], err) // exit 3
			}
			if err != nil {
				return badGroup(err, args[0])
			}
			if a.jsonOut {
				return a.printJSON(toLeaderJSON(l))
			}
			w := a.table()
			row(w, "group:", l.Namespace+"/"+l.Group)
			row(w, "leader:", fmt.Sprintf("%s (host %s, pid %d)", l.Owner, l.Host, l.PID))
			if l.AppVersion != "" {
				row(w, "version:", l.AppVersion)
			}
			row(w, "term:", l.Term)
			row(w, "elected:", ts(l.ElectedAt)+"  ("+relative(l.ElectedAt)+")")
			row(w, "expires:", ts(l.ExpiresAt)+"  ("+relative(l.ExpiresAt)+", unless renewed)")
			return w.Flush()
		}),
	}
}

// noLeaderError is leader's error when GROUP has no leader: err (the
// library's, matching sentinel.ErrNoLeader: exit 3) said in the
// operator's words, with the command lines to run next and where else the
// group is already in it.
type noLeaderError struct {
	msg string
	err error
}

func (e *noLeaderError) Error() string { return e.msg }
func (e *noLeaderError) Unwrap() error { return e.err }

// noLeader is leader's error for group, which has no leader in the
// namespace (err, the library's): when the group is here (a leadership
// row, resigned or expired, or live electors), the members command line to
// see who campaigns, and any other namespace that has the group; when it
// is not, that the namespace has no such group, and where it is instead
// (elsewhereHint). The library's text names its Go method (Members);
// the operator needs a command line.
func (a *app) noLeader(cmd *cobra.Command, group string, err error) error {
	ctx := cmd.Context()
	ms, merr := a.client.Members(ctx, group)
	found, capped, here, lerr := a.lookElsewhere(ctx, electionLookup, group)
	here = here || (merr == nil && len(ms) > 0)
	var b strings.Builder
	if here {
		fmt.Fprintf(&b, "election group %q of namespace %q has no leader now (resigned or expired by the database clock; wait for an elector to win); its live electors:\n  %s",
			group, a.namespace, a.keyCommand("members", []string{group}, "--namespace", a.namespace))
	} else {
		fmt.Fprintf(&b, "namespace %q has no election group %q, so no leader (no elector of it runs or has led there)", a.namespace, group)
	}
	if lerr == nil {
		if hint := a.elsewhereText(cmd, electionLookup, group, found, capped, here); hint != "" {
			b.WriteString("\n" + hint)
		}
	}
	return &noLeaderError{msg: b.String(), err: err}
}

func (a *app) membersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "members GROUP",
		Short: "List the running electors of a group, the leader marked",
		Long: `members lists the live electors of GROUP in --namespace, oldest first: owner,
host, pid, app version, when each joined and last polled. The leader is
marked with *. Electors that stopped polling drop out once their member row
expires on the database clock.`,
		Example: `  sentinel members scheduler -n billing
  sentinel members scheduler --json`,
		Args: args(1, 1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			ms, err := a.client.Members(cmd.Context(), args[0])
			if err != nil {
				return badGroup(err, args[0])
			}
			if a.jsonOut {
				out := make([]memberJSON, len(ms))
				for i, m := range ms {
					out[i] = memberJSON{electorJSON: electorJSON{m.Namespace, m.Group, m.Owner, m.Host, m.PID, m.AppVersion},
						Leader: m.Leader, StartedAt: tsJSON(m.StartedAt), LastPoll: tsJSON(m.LastPoll), ExpiresAt: tsJSON(m.ExpiresAt)}
				}
				return a.printJSON(out)
			}
			if len(ms) == 0 {
				fprintf(a.stderr, "no electors in %s/%s\n", a.namespace, args[0])
				if hint := a.elsewhereHint(cmd, electionLookup, args[0], args[0]); hint != "" {
					for _, line := range strings.Split(hint, "\n") {
						fprintln(a.stderr, line)
					}
				}
				return nil
			}
			w := a.table()
			row(w, "", "OWNER", "HOST", "PID", "VERSION", "JOINED", "LAST POLL")
			for _, m := range ms {
				mark := ""
				if m.Leader {
					mark = "*"
				}
				row(w, mark, m.Owner, m.Host, m.PID, m.AppVersion, ts(m.StartedAt), ts(m.LastPoll)+" ("+relative(m.LastPoll)+")")
			}
			return w.Flush()
		}),
	}
}

// Environment passed to the command run by elect.
const (
	envElectionGroup     = "SENTINEL_ELECTION_GROUP"
	envElectionNamespace = "SENTINEL_ELECTION_NAMESPACE"
	envElectionTerm      = "SENTINEL_ELECTION_TERM"
)

// termHeld is a leadership term seen as something a command runs under:
// Done when the term's ctx ends (the leader's local deadline passed, or it
// was taken over). Releasing is left to the elector's Run, which gives the
// term up (waking the followers) once OnElected returned.
type termHeld struct {
	ctx  context.Context
	el   *sentinel.Elector
	term int64
	ttl  time.Duration
	a    *app
}

func (h termHeld) Deadline() time.Time {
	if h.el == nil {
		return time.Time{}
	}
	return h.el.Deadline()
}

func (h termHeld) Done() <-chan struct{} { return h.ctx.Done() }
func (h termHeld) Err() error {
	return fmt.Errorf("leadership ended before the command did (renewals failed or another elector took over): %w",
		context.Cause(h.ctx))
}
func (h termHeld) Release(context.Context) error { return nil }

// Verify checks that the term is still the group's current, unexpired one.
func (h termHeld) Verify(ctx context.Context) error {
	return h.a.verifyInTx(ctx, func(tx pgx.Tx) error {
		return h.a.client.VerifyTerm(ctx, tx, h.el.Group(), h.term, sentinel.WithTTL(h.ttl))
	})
}

func (a *app) electCmd() *cobra.Command {
	var (
		ttl        time.Duration
		appVersion string
		o          cmdOpts
		group      string
		command    []string
	)
	cmd := &cobra.Command{
		Use:   "elect GROUP [-- CMD [ARGS...]]",
		Short: "Campaign for leadership of a group; run a command while leading",
		Long: `elect joins GROUP in --namespace as an elector and campaigns. Once elected it
runs CMD with SENTINEL_ELECTION_GROUP, SENTINEL_ELECTION_NAMESPACE and
SENTINEL_ELECTION_TERM (the term: a fencing token, for VerifyTerm) in its
environment; the term is renewed while CMD runs. When CMD exits, elect
steps down (a follower takes over within milliseconds) and exits with
CMD's exit code (128+N when a signal N ended it; 127 when CMD is not
found, 126 when it cannot be executed, as in a shell).

If leadership is lost while CMD runs (renewals could not reach the database
before the term's local deadline), CMD's process tree is killed (see
below) and elect exits with CMD's code, or 1 if CMD exited 0.

CMD is what follows --: GROUP is the only word before it, and a command
given without -- is refused (exit 2) with the command line that runs it
(sentinel elect GROUP -- CMD), since its flags would be taken for elect's
own.

Without CMD, elect prints the term once elected and leads until
interrupted (then steps down, exit 0); exit 1 if leadership is lost. While
following it prints each new leader to stderr. Interrupted before being
elected, elect exits 4 (CMD did not run).` + fmt.Sprintf(guardPointer, "leadership", "term"),
		Example: `  sentinel elect scheduler -n billing -- ./run-scheduler.sh
  sentinel elect scheduler --ttl 5s -- sh -c 'exec scheduler --term "$SENTINEL_ELECTION_TERM"'
  sentinel elect maintenance --json   # lead until Ctrl-C`,
		Args: args(1, -1),
		RunE: a.runEChecked(func(cmd *cobra.Command, args []string) error {
			var err error
			if group, command, err = a.splitNamed(cmd, args); err != nil {
				return err
			}
			if err := checkNames("GROUP", []string{group}); err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return err
			}
			return checkTTL(ttl, true)
		}, func(cmd *cobra.Command, args []string) error {
			a.warnElsewhere(cmd, electionLookup, group)
			return a.elect(cmd.Context(), group, command, sentinel.ElectorOptions{TTL: ttl, AppVersion: appVersion}, o)
		}),
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "leadership lease; a follower takes over within this after the leader dies")
	cmd.Flags().StringVar(&appVersion, "app-version", "", "version shown by 'leader' and 'members'")
	o.flags(cmd)
	return cmd
}

// elect runs an elector until command (or, without one, ctx) ends; see
// electCmd.
func (a *app) elect(ctx context.Context, group string, command []string, opts sentinel.ElectorOptions, o cmdOpts) error {
	// The elector's Run gets a ctx of its own, cancelled once the command
	// is done: an interrupt must reach the command first, and the term is
	// given up only after it has exited.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	result := make(chan error, 1)
	elector := make(chan *sentinel.Elector, 1) // for OnElected, once created
	// leading is closed once OnElected runs: from then on an interrupt is
	// OnElected's to handle (the command gets SIGTERM and its grace).
	leading := make(chan struct{})
	var leadOnce sync.Once
	opts.OnNewLeader = func(l sentinel.Leader) {
		fprintf(a.stderr, "sentinel: following: %s/%s is led by %s (term %d)\n", l.Namespace, l.Group, l.Owner, l.Term)
	}
	opts.OnElected = func(tctx context.Context, term int64) {
		defer stopRun()
		leadOnce.Do(func() { close(leading) })
		what := fmt.Sprintf("leadership of %s/%s (term %d)", a.namespace, group, term)
		if len(command) == 0 {
			result <- a.leadUntilInterrupted(ctx, tctx, group, term)
			return
		}
		fprintf(a.stderr, "sentinel: elected: %s; running %s\n", what, command[0])
		result <- a.runHeld(ctx, termHeld{ctx: tctx, el: <-elector, term: term, ttl: opts.TTL, a: a}, what, []string{
			envElectionGroup + "=" + group,
			envElectionNamespace + "=" + a.namespace,
			envElectionTerm + "=" + strconv.FormatInt(term, 10),
		}, command, o, opts.TTL)
	}
	el, err := a.client.Elector(group, opts)
	if err != nil {
		return badGroup(err, group)
	}
	elector <- el
	ran := make(chan error, 1)
	go func() { ran <- el.Run(runCtx) }()
	select {
	case err := <-result:
		if rerr := <-ran; err == nil && rerr != nil {
			err = rerr
		}
		return err
	case err := <-ran: // Run ended before any term: the client failed
		if err == nil {
			err = errors.New("the elector stopped before it was elected")
		}
		return err
	case <-ctx.Done():
		// Interrupted: while leading, OnElected stops the command (SIGTERM,
		// then SIGKILL after --kill-after) and reports its code; the term
		// ends only once it returned (ending it first would kill the tree
		// at once, as for a lost term). While campaigning, just leave.
		select {
		case <-leading:
			err := <-result
			if rerr := <-ran; err == nil && rerr != nil {
				err = rerr
			}
			return err
		default:
		}
		stopRun()
		rerr := <-ran
		select {
		case err := <-result:
			return err
		default:
		}
		if rerr != nil {
			return rerr
		}
		return refused("elect %q/%q: interrupted before being elected; nothing ran", a.namespace, group)
	}
}

// leadUntilInterrupted prints the term and waits for ctx (interrupt: step
// down, nil) or the term's end (lost: an error).
func (a *app) leadUntilInterrupted(ctx, tctx context.Context, group string, term int64) error {
	if a.jsonOut {
		if err := a.printJSON(map[string]any{"namespace": a.namespace, "group": group, "term": term,
			"owner": a.client.Owner()}); err != nil {
			return err
		}
	} else {
		fprintf(a.stdout, "leading %s/%s with term %d; interrupt to step down\n", a.namespace, group, term)
	}
	select {
	case <-ctx.Done():
		fprintf(a.stderr, "stepped down from %s/%s\n", a.namespace, group)
		return nil
	case <-tctx.Done():
		return termHeld{ctx: tctx}.Err()
	}
}

func (a *app) observeCmd() *cobra.Command {
	var (
		interval time.Duration
		count    int
	)
	cmd := &cobra.Command{
		Use:   "observe GROUP",
		Short: "Print each new leader of a group as it is elected",
		Long: `observe watches GROUP in --namespace without campaigning and prints a line
each time its leadership changes: a new term (who leads, since when), or
no leader (resigned, or expired on the database clock). It reads the
leadership row every --interval; it prints the current state first. It
runs until interrupted (exit 0) or until --count lines were printed. With
--json it prints one JSON object per line ({"leader": null} for none).`,
		Example: `  sentinel observe scheduler -n billing
  sentinel observe scheduler --json --interval 200ms`,
		Args: args(1, 1),
		RunE: a.runEChecked(func(*cobra.Command, []string) error {
			if interval < 10*time.Millisecond {
				return usageErr("--interval must be at least 10ms")
			}
			return checkCount(count)
		}, func(cmd *cobra.Command, args []string) error {
			ctx, group := cmd.Context(), args[0]
			a.warnElsewhere(cmd, electionWatchLookup, group)
			lines := lineCounter{max: count}
			last := int64(-1) // the term printed last; 0: "no leader"
			for {
				l, err := a.client.Leader(ctx, group)
				switch {
				case ctx.Err() != nil:
					return nil
				case errors.Is(err, sentinel.ErrNoLeader):
					l = nil
				case err != nil:
					return badGroup(err, group)
				}
				term := int64(0)
				if l != nil {
					term = l.Term
				}
				if term != last {
					last = term
					if err := a.printLeaderChange(group, l); err != nil {
						return err
					}
					if lines.printed() != nil {
						return nil // --count reached
					}
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		}),
	}
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "how often to read the leadership")
	cmd.Flags().IntVar(&count, "count", 0, "exit after printing this many changes (0: until interrupted; less than 0 exits 2)")
	return cmd
}

func (a *app) printLeaderChange(group string, l *sentinel.Leader) error {
	if a.jsonOut {
		var lj *leaderJSON
		if l != nil {
			j := toLeaderJSON(l)
			lj = &j
		}
		return a.printJSONLine(map[string]any{"namespace": a.namespace, "group": group, "leader": lj,
			"at": tsJSON(time.Now())})
	}
	now := ts(time.Now())
	if l == nil {
		fprintf(a.stdout, "%s  %s/%s: no leader\n", now, a.namespace, group)
		return nil
	}
	fprintf(a.stdout, "%s  %s/%s: term %d led by %s (host %s, pid %d), elected %s\n",
		now, a.namespace, group, l.Term, l.Owner, l.Host, l.PID, ts(l.ElectedAt))
	return nil
}

// electionJSON is a group as printed by elections --json.
type electionJSON struct {
	Namespace string      `json:"namespace"`
	Group     string      `json:"group"`
	Leader    *leaderJSON `json:"leader"`
	Members   int         `json:"members"`
}

func (a *app) electionsCmd() *cobra.Command {
	var (
		ns    nsFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "elections",
		Short: "List the election groups: leader, term, live members",
		Long: `elections lists the election groups of --namespace (or of every namespace
with --all-namespaces): every group with a leadership row or a live
elector, its current leader and term (or "-" when it has none now) and how
many electors are live (stderr says when more than --limit groups
match). Liveness is decided by the database clock. See
'sentinel leader GROUP' and 'sentinel members GROUP' for one group.`,
		Example: `  sentinel elections -n billing
  sentinel elections --all-namespaces --json`,
		Args: args(0, 0),
		RunE: a.runEChecked(func(*cobra.Command, []string) error { return checkListLimit(limit) }, func(cmd *cobra.Command, _ []string) error {
			namespace, err := ns.resolve(cmd, a)
			if err != nil {
				return err
			}
			ask, shown := oneMore(limit)
			es, err := a.client.Elections(cmd.Context(), sentinel.ElectionFilter{Namespace: namespace, AllNamespaces: ns.all, Limit: ask})
			if err != nil {
				return err
			}
			if len(es) > shown {
				es = es[:shown]
				defer a.leftOut(shown, "election groups", "raise --limit")
			}
			if len(es) == 0 && namespace != "" && a.jsonOut {
				fprintf(a.stderr, "no election groups in %s; every namespace:\n  %s\n", nsLabel(namespace), a.againEvery(cmd))
			}
			if a.jsonOut {
				out := make([]electionJSON, len(es))
				for i, e := range es {
					out[i] = electionJSON{Namespace: e.Namespace, Group: e.Group, Members: e.Members}
					if e.Leader != nil {
						l := toLeaderJSON(e.Leader)
						out[i].Leader = &l
					}
				}
				return a.printJSON(out)
			}
			if len(es) == 0 && namespace == "" {
				fprintln(a.stderr, "no election groups in any namespace")
				return nil
			}
			if len(es) == 0 {
				fprintf(a.stderr, "no election groups in %s; every namespace:\n  %s\n", nsLabel(namespace), a.againEvery(cmd))
				return nil
			}
			w := a.table()
			row(w, "NAMESPACE", "GROUP", "LEADER", "HOST", "PID", "TERM", "EXPIRES", "MEMBERS")
			for _, e := range es {
				if l := e.Leader; l != nil {
					row(w, e.Namespace, e.Group, l.Owner, l.Host, l.PID, l.Term, ts(l.ExpiresAt)+" ("+relative(l.ExpiresAt)+")", e.Members)
				} else {
					row(w, e.Namespace, e.Group, "-", "-", "-", "-", "-", e.Members)
				}
			}
			return w.Flush()
		}),
	}
	ns.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many groups")
	return cmd
}
