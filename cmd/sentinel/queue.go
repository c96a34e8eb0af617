package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/nswalk"
)

func (a *app) queueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Fair queues (turns): status, follow, reset, lock",
		Long: `queue inspects and uses the fair FIFO queues of --namespace: the resources
that programs take turns on with Client.Turn. Every ticket is a fencing
token; the holder is the lowest live ticket.`,
		Example: `  sentinel queue status
  sentinel queue follow printer
  sentinel queue reset printer
  sentinel queue lock printer scanner -- ./scan-and-print.sh`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.queueStatusCmd(), a.queueFollowCmd(), a.queueResetCmd(), a.queueLockCmd())
	return cmd
}

// ticketJSON is a live ticket as printed with --json.
type ticketJSON struct {
	Ticket    int64   `json:"ticket"`
	Label     string  `json:"label"`
	Owner     string  `json:"owner"`
	Host      string  `json:"host"`
	PID       int     `json:"pid"`
	DrawnAt   *string `json:"drawn_at"`
	ServedAt  *string `json:"served_at"`
	ExpiresAt *string `json:"expires_at"`
}

// queueJSON is a queue as printed with --json.
type queueJSON struct {
	Namespace string       `json:"namespace"`
	Resource  string       `json:"resource"`
	Holder    *ticketJSON  `json:"holder"`
	Waiting   []ticketJSON `json:"waiting"`
}

func toTicketJSON(t sentinel.Ticket) ticketJSON {
	return ticketJSON{Ticket: t.Ticket, Label: t.Label, Owner: t.Owner, Host: t.Host, PID: t.PID,
		DrawnAt: tsJSON(t.DrawnAt), ServedAt: tsJSON(t.ServedAt), ExpiresAt: tsJSON(t.ExpiresAt)}
}

func toQueueJSON(q sentinel.QueueStatus) queueJSON {
	j := queueJSON{Namespace: q.Namespace, Resource: q.Resource, Waiting: []ticketJSON{}}
	if q.Holder != nil {
		h := toTicketJSON(*q.Holder)
		j.Holder = &h
	}
	for _, t := range q.Waiting {
		j.Waiting = append(j.Waiting, toTicketJSON(t))
	}
	return j
}

// ticketName is how a ticket shows in turn's status report: its label, or
// its owner when it has none.
func ticketName(t sentinel.Ticket) string {
	if t.Label != "" {
		return t.Label
	}
	return "(" + t.Owner + ")"
}

func (a *app) queueStatusCmd() *cobra.Command {
	var ns nsFlags
	cmd := &cobra.Command{
		Use:   "status [RESOURCE...]",
		Short: "Show each queue: whose turn it is, and who waits, in order",
		Long: `queue status prints a snapshot of the queues of RESOURCEs, or of every
resource with a live ticket when none is given, in turn's layout: the
resource with the ticket being served, then every live ticket in the order
it is served, by label (or owner when unlabelled). A holder whose client
has not yet confirmed its turn is marked "(handover)".`,
		Example: `  sentinel queue status
  sentinel queue status printer scanner -n office
  sentinel queue status --json`,
		RunE: a.runE(func(cmd *cobra.Command, resources []string) error {
			ctx := cmd.Context()
			namespaces, err := a.queueNamespaces(cmd, &ns)
			if err != nil {
				return err
			}
			if !ns.all {
				for _, r := range resources {
					a.warnElsewhere(cmd, queueWatchLookup, r)
				}
			}
			var qs []sentinel.QueueStatus // the queues of every namespace
			for _, n := range namespaces {
				if len(resources) == 0 {
					nq, err := a.client.Queues(ctx, sentinel.WithNamespace(n))
					if err != nil {
						return err
					}
					qs = append(qs, nq...)
				}
				for _, r := range resources {
					q, err := a.client.Queue(ctx, r, sentinel.WithNamespace(n))
					if err != nil {
						return err
					}
					qs = append(qs, *q)
				}
			}
			if len(qs) == 0 && !ns.all && a.jsonOut {
				fprintf(a.stderr, "no queue in %s has a live ticket; every namespace:\n  %s\n", nsLabel(nsOf(&ns, a)), a.againEvery(cmd))
			}
			if a.jsonOut {
				out := make([]queueJSON, len(qs))
				for i, q := range qs {
					out[i] = toQueueJSON(q)
				}
				return a.printJSON(out)
			}
			if len(qs) == 0 && !ns.all {
				fprintf(a.stderr, "no queue in %s has a live ticket; every namespace:\n  %s\n", nsLabel(nsOf(&ns, a)), a.againEvery(cmd))
				return nil
			}
			if len(qs) == 0 {
				fprintf(a.stderr, "no queue in %s has a live ticket\n", nsLabel(nsOf(&ns, a)))
				return nil
			}
			const width = 60
			for i, q := range qs {
				if i > 0 {
					fprintln(a.stdout)
				}
				holder := "-"
				if q.Holder != nil {
					holder = strconv.FormatInt(q.Holder.Ticket, 10)
				}
				title := q.Resource
				if ns.all {
					title = q.Namespace + "/" + q.Resource
				}
				fprintln(a.stdout, padded(title, holder, width))
				fprintln(a.stdout, strings.Repeat("-", width))
				if q.Holder == nil {
					fprintln(a.stdout, "(empty)")
					continue
				}
				name := ticketName(*q.Holder)
				if q.Holder.ServedAt.IsZero() {
					name += " (handover)"
				}
				fprintln(a.stdout, padded(name, strconv.FormatInt(q.Holder.Ticket, 10), width))
				for _, t := range q.Waiting {
					fprintln(a.stdout, padded(ticketName(t), strconv.FormatInt(t.Ticket, 10), width))
				}
			}
			return nil
		}),
	}
	ns.add(cmd)
	return cmd
}

// queueNamespaces is the namespace of a queue command: --namespace, or
// with --all-namespaces every namespace that has a queue (a ticket, or a
// queue's history).
func (a *app) queueNamespaces(cmd *cobra.Command, ns *nsFlags) ([]string, error) {
	n, err := ns.resolve(cmd, a)
	if err != nil || !ns.all {
		return []string{n}, err
	}
	q := strings.ReplaceAll(sqlQueueNamespaces, "{{schema}}", pgx.Identifier{a.schema}.Sanitize())
	rows, err := a.pool.Query(cmd.Context(), q)
	if err != nil {
		return nil, fmt.Errorf("list the namespaces of queues: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// sqlQueueNamespaces lists the namespaces that have a queue: a ticket, a
// queue row or a queue's history, each table walked along its primary key
// (nswalk.Walk), so the cost grows with the namespaces, not with the
// tickets or the history (queue_events grows by a few rows every turn;
// reading it whole cost every such read).
var sqlQueueNamespaces = `
WITH RECURSIVE ` + nswalk.Walk("tk", "tickets", "") + `,
` + nswalk.Walk("qu", "queues", "") + `,
` + nswalk.Walk("ev", "queue_events", "") + `
SELECT namespace FROM tk WHERE namespace IS NOT NULL
UNION SELECT namespace FROM qu WHERE namespace IS NOT NULL
UNION SELECT namespace FROM ev WHERE namespace IS NOT NULL
ORDER BY 1`

// nsOf is the namespace of a command with nsFlags, "" for all.
func nsOf(ns *nsFlags, a *app) string {
	if ns.all {
		return ""
	}
	return a.namespace
}

// padded puts left and right on one line of at least width columns.
func padded(left, right string, width int) string {
	left = esc(left)
	gap := width - len([]rune(left)) - len(right)
	if gap < 2 {
		gap = 2
	}
	return left + strings.Repeat(" ", gap) + right
}

// queueEventJSON is a progression message as printed with --json.
type queueEventJSON struct {
	ID        int64   `json:"id"`
	Namespace string  `json:"namespace"`
	Resource  string  `json:"resource"`
	Ticket    int64   `json:"ticket"`
	Type      string  `json:"type"`
	Label     string  `json:"label"`
	Owner     string  `json:"owner"`
	By        int64   `json:"by,omitempty"`
	At        *string `json:"at"`
	Message   string  `json:"message"`
}

func (a *app) queueFollowCmd() *cobra.Command {
	var (
		count int
		after int64
		ns    nsFlags
	)
	var printEv func(sentinel.QueueEvent, *lineCounter) error
	cmd := &cobra.Command{
		Use:   "follow [RESOURCE...]",
		Short: "Print queue progression messages live, in turn's style",
		Long: `queue follow prints the progression of the queues of RESOURCEs (every
resource of --namespace when none is given, including queues created
later) as it happens, one message per line:

  printer: 5 assigned to "nightly report"
  printer: 5 granted
  printer: 5 completed by "nightly report"
  printer: 6 crashed

Messages come from the queue history, in order, none missed: it starts
with what is recorded from now on, or with --after ID after that event
(resume a follow without a gap; --after 0 replays the whole history). It
runs until interrupted (exit 0) or until --count messages were printed.
With --json it prints one JSON object per line, with the event's id.

Without RESOURCEs, when --namespace (by default "default") has no queue
while others have, a note on stderr names them, each with the same command
there; it goes on following --namespace.`,
		Example: `  sentinel queue follow printer
  sentinel queue follow -n office --json
  sentinel queue follow printer --after 1234   # resume after event 1234`,
		RunE: a.runEChecked(func(*cobra.Command, []string) error { return checkCount(count) }, func(cmd *cobra.Command, resources []string) error {
			var opts []sentinel.Option
			if cmd.Flags().Changed("after") {
				opts = append(opts, sentinel.WithAfterEvent(after))
			}
			namespaces, err := a.queueNamespaces(cmd, &ns)
			if err != nil {
				return err
			}
			if !ns.all {
				for _, r := range resources {
					a.warnElsewhere(cmd, queueWatchLookup, r)
				}
				if len(resources) == 0 && !a.jsonOut {
					a.warnEmptyQueueNamespace(cmd)
				}
			}
			if !a.jsonOut {
				what := "every queue"
				if len(resources) > 0 {
					what = strings.Join(resources, ", ")
				}
				fprintf(a.stderr, "following %s in %s; interrupt to stop\n", what, nsLabel(nsOf(&ns, a)))
			}
			lines := lineCounter{max: count}
			var mu sync.Mutex // one line at a time across namespaces
			follow := func(ctx context.Context, n string) error {
				return a.client.FollowQueues(ctx, resources, func(ev sentinel.QueueEvent) error {
					mu.Lock()
					defer mu.Unlock()
					if ns.all && !a.jsonOut {
						ev.Resource = ev.Namespace + "/" + ev.Resource
					}
					return printEv(ev, &lines)
				}, append(opts, sentinel.WithNamespace(n))...)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			errs := make(chan error, len(namespaces))
			for _, n := range namespaces {
				go func() { errs <- follow(ctx, n) }()
			}
			err = <-errs // the first to end ends them all
			cancel()
			for range len(namespaces) - 1 {
				<-errs
			}
			return streamEnd(cmd, err)
		}),
	}
	ns.add(cmd)
	printEv = func(ev sentinel.QueueEvent, lines *lineCounter) error {
		if a.jsonOut {
			if err := a.printJSONLine(queueEventJSON{ID: ev.ID, Namespace: ev.Namespace, Resource: ev.Resource,
				Ticket: ev.Ticket, Type: ev.Type, Label: ev.Label, Owner: ev.Owner, By: ev.By,
				At: tsJSON(ev.At), Message: ev.String()}); err != nil {
				return err
			}
		} else {
			fprintln(a.stdout, ev.String())
		}
		return lines.printed()
	}
	cmd.Flags().IntVar(&count, "count", 0, "exit after printing this many messages (0: until interrupted; less than 0 exits 2)")
	cmd.Flags().Int64Var(&after, "after", 0, "start after this event ID (the \"id\" of --json), replaying what was recorded since; 0 replays the whole history")
	return cmd
}

func (a *app) queueResetCmd() *cobra.Command {
	var ns nsFlags
	cmd := &cobra.Command{
		Use:   "reset [RESOURCE...]",
		Short: "Remove dead tickets from queues; busy queues are left alone",
		Long: `queue reset removes the dead tickets (expired on the database clock, their
client gone) of RESOURCEs, or of every resource of --namespace when none
is given, recording each as crashed or bumped. A queue with a live holder
or waiter is busy: it is not touched, a message says so, and the exit code
is 4. Only dead tickets are ever removed, which the queue would skip anyway,
so reset asks no confirmation. A RESOURCE with no queue in --namespace
but one in another namespace is named on stderr, with the same command
there.`,
		Example: `  sentinel queue reset printer
  sentinel queue reset -n office --json`,
		RunE: a.runE(func(cmd *cobra.Command, resources []string) error {
			ctx := cmd.Context()
			namespaces, err := a.queueNamespaces(cmd, &ns)
			if err != nil {
				return err
			}
			if !ns.all {
				// A resource with no queue here, but one elsewhere: "removed
				// 0" would read as a clean queue.
				for _, r := range resources {
					a.warnElsewhere(cmd, queueWatchLookup, r)
				}
			}
			// With --all-namespaces every resource is named NAMESPACE/RESOURCE.
			name := func(n, r string) string {
				if ns.all {
					return n + "/" + r
				}
				return r
			}
			removed := map[string]int{}
			var errs error
			for _, n := range namespaces {
				if len(resources) == 0 {
					got, err := a.client.ResetQueues(ctx, sentinel.WithNamespace(n))
					if err != nil && !errors.Is(err, sentinel.ErrQueueBusy) {
						return err
					}
					for r, c := range got {
						removed[name(n, r)] = c
					}
					errs = errors.Join(errs, err)
				}
				for _, r := range resources {
					c, err := a.client.ResetQueue(ctx, r, sentinel.WithNamespace(n))
					if err != nil && !errors.Is(err, sentinel.ErrQueueBusy) {
						return err
					}
					removed[name(n, r)] = c
					errs = errors.Join(errs, err)
				}
			}
			for _, b := range busyQueues(errs) {
				b.Resource = name(b.Namespace, b.Resource)
			}
			busy := busyQueues(errs)
			if a.jsonOut {
				out := struct {
					Removed map[string]int `json:"removed"`
					Busy    map[string]int `json:"busy"` // resource: live tickets
				}{Removed: removed, Busy: map[string]int{}}
				for _, b := range busy {
					out.Busy[b.Resource] = b.Live
					delete(out.Removed, b.Resource)
				}
				if err := a.printJSON(out); err != nil {
					return err
				}
			} else {
				names := make([]string, 0, len(removed))
				for r := range removed {
					names = append(names, r)
				}
				sort.Strings(names)
				isBusy := map[string]bool{}
				for _, b := range busy {
					isBusy[b.Resource] = true
					fprintf(a.stdout, "%s: busy (%d live tickets), not reset\n", b.Resource, b.Live)
				}
				for _, r := range names {
					if !isBusy[r] {
						fprintf(a.stdout, "%s: removed %d dead tickets\n", r, removed[r])
					}
				}
				if len(names) == 0 && len(busy) == 0 {
					fprintf(a.stderr, "no queue in %s has tickets\n", nsLabel(nsOf(&ns, a)))
				}
			}
			if len(busy) > 0 {
				return &codeError{code: exitRefused} // the messages are printed
			}
			return nil
		}),
	}
	ns.add(cmd)
	return cmd
}

// busyQueues unpacks the QueueBusyErrors of an error or a joined error.
func busyQueues(err error) []*sentinel.QueueBusyError {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*sentinel.QueueBusyError
		for _, e := range j.Unwrap() {
			out = append(out, busyQueues(e)...)
		}
		return out
	}
	var b *sentinel.QueueBusyError
	if errors.As(err, &b) {
		return []*sentinel.QueueBusyError{b}
	}
	return nil
}

// Environment passed to the command run by queue lock.
const (
	envQueueNamespace = "SENTINEL_QUEUE_NAMESPACE"
	envQueueResources = "SENTINEL_QUEUE_RESOURCES" // space-separated, sorted
	envQueueTickets   = "SENTINEL_QUEUE_TICKETS"   // resource=ticket, space-separated, sorted
)

func (a *app) queueLockCmd() *cobra.Command {
	var (
		label     string
		ttl       time.Duration
		timeout   time.Duration
		o         cmdOpts
		resources []string
		command   []string
	)
	cmd := &cobra.Command{
		Use:   "lock RESOURCE... [-- CMD [ARGS...]]",
		Short: "Take a turn on resources (in sorted order) while a command runs",
		Long: `queue lock queues for a turn on every RESOURCE, one after the other in sorted
order (so that overlapping locks never deadlock), keeps the tickets alive,
and runs CMD with SENTINEL_QUEUE_NAMESPACE, SENTINEL_QUEUE_RESOURCES and
SENTINEL_QUEUE_TICKETS ("printer=5 scanner=6": each ticket is a fencing
token, for VerifyTurn) in its environment. When CMD exits the turns are
released (the next ticket is served at once) and queue lock exits with
CMD's exit code (128+N when a signal N ended it). A CMD that cannot be
started exits as in a shell, the turns released at once: 127 when it is
not found, 126 when it is found but cannot be executed.

CMD is what follows --: every word before it is a RESOURCE, so
"queue lock printer lp report.pdf" queues on three resources (lp, printer,
report.pdf) and holds them; write "queue lock printer -- lp report.pdf".
RESOURCEs that start with - go after a first --, the other RESOURCEs with
them, and CMD after a second: queue lock -- -r printer -- CMD.

If a turn is lost while CMD runs, CMD's process tree is killed (see
below) and queue lock exits with CMD's code, or 1 if it exited 0.
Without CMD it prints the tickets and holds the turns until interrupted.
--timeout gives up waiting (exit 4, tickets cancelled); so does an
interrupt while waiting (exit 4, CMD did not run).` + fmt.Sprintf(guardPointer, "turn", "turn"),
		Example: `  sentinel queue lock printer -- lp report.pdf
  sentinel queue lock printer scanner --label "monthly scan" -- ./scan-and-print.sh
  sentinel queue lock printer        # hold until Ctrl-C
  sentinel queue lock -- -tray2 printer -- lp report.pdf   # a RESOURCE that starts with -`,
		Args: args(1, -1),
		RunE: a.runEChecked(func(cmd *cobra.Command, args []string) error {
			var err error
			if resources, command, err = splitResources(cmd, args); err != nil {
				return err
			}
			if err := checkNames("RESOURCE", resources); err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return err
			}
			if timeout < 0 {
				return usageErr("--timeout %s: give a duration of 0 (wait forever) or more", timeout)
			}
			return checkTTL(ttl, false)
		}, func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("label") {
				label = "sentinel queue lock by " + a.operator
			}
			for _, r := range resources {
				a.warnElsewhere(cmd, queueLookup, r)
			}
			ctx := cmd.Context()
			tctx := ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				tctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			set, err := a.client.TurnAll(tctx, resources, sentinel.WithLabel(label), sentinel.WithTTL(ttl))
			if err != nil {
				if errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
					return refused("queue lock %s: not served within --timeout %s: %w", strings.Join(resources, " "), timeout, err)
				}
				if ctx.Err() != nil { // the tickets were cancelled
					return refused("queue lock %s: interrupted while waiting; not served, nothing ran", strings.Join(resources, " "))
				}
				return err
			}
			defer func() { _ = set.Release(context.WithoutCancel(ctx)) }()
			var names, tickets []string
			for _, t := range set.Turns() {
				names = append(names, t.Resource())
				tickets = append(tickets, t.Resource()+"="+strconv.FormatInt(t.Ticket(), 10))
			}
			what := "turn on " + strings.Join(names, ", ")
			if len(command) == 0 {
				return a.holdTurns(ctx, set)
			}
			return a.runHeld(ctx, turnsHeld{set, a}, what, []string{
				envQueueNamespace + "=" + a.namespace,
				envQueueResources + "=" + strings.Join(names, " "),
				envQueueTickets + "=" + strings.Join(tickets, " "),
			}, command, o, ttl)
		}),
	}
	cmd.Flags().StringVar(&label, "label", "", `label shown in status and messages (default "sentinel queue lock by OPERATOR")`)
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "ticket time-to-live; heartbeats renew it")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (exit 4); 0 waits forever")
	o.flags(cmd)
	return cmd
}

// splitResources splits the arguments of queue lock into the RESOURCEs
// and the command. Resources that read as flags go after a first "--",
// with the others, and the command after a second one (`queue lock -- -r
// printer -- CMD`, as lock takes such a KEY); without a second "--",
// what follows the one "--" is the command, and no RESOURCE was given.
func splitResources(cmd *cobra.Command, args []string) (resources, command []string, err error) {
	d := cmd.ArgsLenAtDash()
	switch {
	case d < 0:
		return args, nil, nil
	case d == 0:
		if i := slices.Index(args, "--"); i >= 0 {
			resources, command = args[:i], args[i+1:]
			if len(command) == 0 {
				return nil, nil, errNoCommand(cmd)
			}
		} else {
			// One "--" with nothing before it: what follows is CMD
			// (queue lock -- make deploy forgot its RESOURCE), not
			// resources to hold until interrupted.
			command = args
		}
	default:
		resources, command = args[:d], args[d:]
		if len(command) == 0 {
			return nil, nil, errNoCommand(cmd)
		}
	}
	if len(resources) == 0 {
		return nil, nil, usageErr("queue lock needs at least one RESOURCE before the command; %s", dashNameHint(cmd))
	}
	return resources, command, nil
}

func (a *app) holdTurns(ctx context.Context, set *sentinel.TurnSet) error {
	if a.jsonOut {
		out := map[string]int64{}
		for _, t := range set.Turns() {
			out[t.Resource()] = t.Ticket()
		}
		if err := a.printJSON(map[string]any{"namespace": a.namespace, "tickets": out}); err != nil {
			return err
		}
	} else {
		for _, t := range set.Turns() {
			fprintf(a.stdout, "%s: holding ticket %d\n", t.Resource(), t.Ticket())
		}
		fprintln(a.stdout, "interrupt to release")
	}
	select {
	case <-ctx.Done():
		if err := set.Release(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		fprintln(a.stderr, "released")
		return nil
	case <-set.Done():
		return fmt.Errorf("turn lost: %w", set.Err())
	}
}

// turnsHeld is a set of turns seen as something a command runs under; its
// deadline is the earliest of the turns'.
type turnsHeld struct {
	*sentinel.TurnSet
	a *app
}

// Verify checks that every turn is still its resource's holder.
func (h turnsHeld) Verify(ctx context.Context) error {
	for _, t := range h.Turns() {
		if err := h.a.client.VerifyTurn(ctx, h.a.pool, t.Resource(), t.Ticket(), sentinel.WithNamespace(t.Namespace())); err != nil {
			return err
		}
	}
	return nil
}

func (h turnsHeld) Deadline() time.Time {
	var d time.Time
	for _, t := range h.Turns() {
		if td := t.Deadline(); d.IsZero() || td.Before(d) {
			d = td
		}
	}
	return d
}
