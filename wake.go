package sentinel

// This file: wake-ups sent after a handover commits, in a transaction of their own (sqlWake).

import (
	"context"
	"sync"
	"time"
)

// Wake-ups after the commit.
//
// PostgreSQL (up to 18 at least) serializes the commits of transactions
// that called NOTIFY: PreCommit_Notify takes a lock on the database that
// is held until the transaction has ended, so across its commit record's
// WAL flush. Two handovers that each notified in their own durable commit
// could not share a flush: with 8 leases handed over at once on separate
// keys, each waited for the flushes of those ahead of it (p50 4.1 ms for
// 8 pairs, 0.6 ms for one; bench, 2026-11-26), and a pgbench of 8
// clients updating their own rows ran at a third of the rate once each
// update also notified.
//
// So the statements that hand something over (a lease release, a turn's
// leave, a resignation) commit durably without notifying, and the
// wake-up follows in a transaction of its own that commits without
// waiting for its flush (synchronous_commit off, for that transaction
// only): it holds the notify lock for microseconds, not for a disk flush,
// and the durable commits of many handovers share flushes again.
//
//   - Turn.leave and Elector.resign send it in the handover's round trip
//     (BEGIN, the handover, COMMIT, then sqlTicketLeaveWake or
//     sqlResignWake, which read what was committed and notify).
//   - A lease release returns the payload of the wake-up it decided (only
//     when somebody waits: a release nobody waits for costs its one
//     statement), and the client's sender (wake, waker) sends it, batched
//     with others decided meanwhile, in sqlWake.
//   - A Once's outcome (its completion, a give-back, a failure: sqlFinish,
//     sqlFinishSet) returns whether callers wait for the key (WithWait),
//     and the sender wakes them on the schema's channel the same way.
//     OnceTx's completion runs in the caller's transaction, whose commit
//     the library does not see: it still notifies in that transaction.
//
// Nothing a waiter trusts is weakened. A notification is sent only after
// the handover's commit returned, so it always names a durable state:
// the grant it announces is on disk before anyone is told. A wake-up lost
// with its sender (killed between the commit and the wake, or the wake's
// statement failing) is what a waiter already survives: every waiter
// re-checks on a timer (a lease waiter at its registration's renewal, a
// third of its TTL at most; a turn at the ticket ahead's expiry; a follower
// at the term's expiry; a Once waiter at the executor's lease expiry, as
// last read), and reads what the handover committed. It costs
// that waiter time, never a grant: the lease, turn or term handed to it is
// counted from the commit, on the database clock, and expires unused
// within its TTL if its waiter is gone too.

// sqlWake sends the notifications $2, each on its channel in $3 (empty
// for the schema's channel $1), and commits without waiting for its WAL
// flush (it writes nothing else).
const sqlWake = `
SELECT pg_catalog.pg_notify(coalesce(nullif(p.c, ''), $1::text), p.p)
FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS p(p, c)`

// wakeTimeout bounds a wake's statement: it is a hint, and the waiters it
// would have woken re-check on their own.
const wakeTimeout = 2 * time.Second

// maxWakeBatch bounds the payloads one wake statement carries.
const maxWakeBatch = 256

// waker sends a client's wake-ups in the background, one statement at a
// time: the wake-ups decided while one is in flight go together in the
// next (8 handovers at once on one client cost one or two wake
// statements, not 8, and the listening backends are signalled as often).
// A lone handover's wake-up is sent at once.
type waker struct {
	mu      sync.Mutex
	pending []wakeUp
	busy    bool
	idle    chan struct{} // closed when the sender stops (nil while none runs)
}

// wakeUp is a notification to send: its payload, and the channel of the
// one process it is for (empty for the schema's channel, heard by every
// process: see listenHub.direct).
type wakeUp struct {
	channel, payload string
}

// wake queues the wake-ups a committed handover decided (see above), on
// channel (empty for the schema's), and returns: the handover's caller does
// not wait for them. Client.Close waits for those queued before it
// (flushWakes).
func (c *Client) wake(channel string, payloads ...string) {
	if c.dropWakes.Load() {
		return
	}
	w := &c.wk
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range payloads {
		if p != "" {
			w.pending = append(w.pending, wakeUp{channel: channel, payload: p})
		}
	}
	if w.busy || len(w.pending) == 0 {
		return
	}
	w.busy, w.idle = true, make(chan struct{})
	go c.sendWakes(w.idle)
}

func (c *Client) sendWakes(idle chan struct{}) {
	w := &c.wk
	for {
		w.mu.Lock()
		batch := w.pending
		if len(batch) > maxWakeBatch {
			batch = batch[:maxWakeBatch:maxWakeBatch]
			w.pending = w.pending[maxWakeBatch:]
		} else {
			w.pending = nil
		}
		if len(batch) == 0 {
			w.busy = false
			w.mu.Unlock()
			close(idle)
			return
		}
		w.mu.Unlock()
		payloads, channels := make([]string, len(batch)), make([]string, len(batch))
		for i, u := range batch {
			payloads[i], channels[i] = u.payload, u.channel
		}
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		if _, err := c.pool.Exec(ctx, sqlWake, c.sql.channel, payloads, channels); err != nil {
			c.cfg.Logger.Debug("sentinel: sending wake-ups failed; the waiters re-check on their own", "wake-ups", len(batch), "err", err)
		}
		cancel()
	}
}

// flushWakes waits until the wake-ups queued so far were sent (or failed),
// or ctx ends (Close's deadline): a wake-up is a hint, and one still
// under way then is sent, or fails, within wakeTimeout.
func (c *Client) flushWakes(ctx context.Context) {
	w := &c.wk
	w.mu.Lock()
	idle := w.idle
	busy := w.busy
	w.mu.Unlock()
	if busy {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
}
