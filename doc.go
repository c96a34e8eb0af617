// Package sentinel makes correctness-sensitive work safe across competing
// workers, with PostgreSQL as its only server: payments that must not charge
// twice, webhooks that must not be processed twice, jobs that must have one
// owner.
//
// # Primitives
//
//   - [Once] runs a function at most once per key across every worker and
//     replays its stored result to later callers. When a worker dies after
//     crossing the execution boundary the key becomes uncertain, never
//     silently re-run; an operator resolves it with [Client.Reconcile],
//     [Client.ForceComplete] or [Client.ResetToClaimed].
//     fn returns [Final] for an outcome that is not a doubt (a declined
//     card), [Retryable] when nothing happened; [WithWait] makes concurrent
//     callers wait for the first one's result.
//   - [OnceTx] is Once for work inside the same database: fn's writes and the
//     completion commit in one transaction, so it is exactly once.
//   - [Client.Lease] grants a fenced, heartbeat-renewed lease on a key.
//     [Lease.Done] closes when the lease is lost, before the database could
//     grant the key to anyone else; [Lease.Token] is a fencing token for
//     downstream writes ([Client.VerifyToken]). [Client.Do] runs a
//     function while holding a lease.
//
// # Lease protocol
//
// Every state change is one statement guarded by key, owner and token, and
// every expiry is decided by the database clock in the statement that acts on
// it. A grant inserts a key's first row, or takes over a row whose expiry
// passed, minting the token (a non-cycling bigint sequence) after the row is
// locked, in the same statement. Release expires the row at once and keeps
// it, so every later grant of the key goes through that row lock. A row
// locked by another transaction is never waited for: it is reported held.
//
//	              grant (first row, or takeover: new token)
//	expired/absent ────────────────────────────────────────▶ held
//	   ▲  ▲                                                  │  │
//	   │  │ release (owner+token guard; expires it, NOTIFY)  │  │ renew (owner+token+unexpired
//	   │  └──────────────────────────────────────────────────┘  │ guard, never past hard TTL)
//	   │                 expiry by the database clock           │
//	   └────────────────────────────────────────────────────────┘
//
// A client renews all its leases in one statement per tick from one
// goroutine. The holder trusts its lease only until (send time of the last
// successful renewal + TTL - SafetyMargin) on Go's monotonic clock; the row
// expires at (database time of that renewal + TTL), which is later. When that
// local deadline passes without a renewal, Done closes and Err reports
// [ErrLeaseLost]: the holder stops before anyone else can acquire.
//
// # Execution states (Once)
//
//	        claim (new token)                 fn ok: store result
//	absent ───────────────▶ claimed ──start──▶ executing ─────────────▶ completed ◀─┐
//	                         ▲   ▲               │    │                  (replayed)  │
//	  lease expired:         │   │ Retryable(err)│    │ error, panic, crash,         │
//	  next caller takes over─┘   └───────────────┘    │ lost lease: lease ends,      │
//	                         ▲                        ▼ key stays executing          │
//	                         │                    uncertain (executing, expired)     │
//	                         │                        │ Reconcile (new token)        │
//	                         │ ResetToClaimed         ▼                              │
//	                         └──────────────────── reconciling ──ForceComplete───────┘
//
// With [WithRerun], an uncertain key with attempts left is not left for an
// operator: the next caller takes it over (a new token, attempt + 1) and
// runs fn again, back in executing; its effect must be deduplicated
// downstream by [EffectKey].
//
// A fresh Once is two single-statement round trips (claim into executing,
// complete), each writing its history rows in the same statement; a replay
// is one (the same claim statement, which then only reads). Concurrent
// callers of one client that outnumber its pool's connections share them:
// their claims and completions go out as one statement over arrays each
// (see [Config].CoalesceInFlight).
// Nothing is written for a replay or a rejection unless
// [Config].RecordRejections is set.
//
// # Leader election
//
// [Client.Elector] campaigns for a group's leadership; [Elector.Run] leads
// and follows until its ctx ends. Leadership is a row of its own table,
// taken in one statement that mints the term (a fencing token from the
// same sequence; [Client.VerifyTerm] guards a leader's writes) and renewed
// by the client's heartbeat in the same statement as its leases.
//
//	            campaign wins: row absent or expired by the database clock
//	┌──────────┐ ─────────────────────────────────────▶ ┌─────────────┐ ──┐ heartbeat renews
//	│ follower │                                         │ leader (T)  │   │ (owner+T guard)
//	└──────────┘ ◀───────────────────────────────────── └─────────────┘ ◀─┘
//	   │    ▲   OnElected's ctx ends; after it returned: release (NOTIFY) on
//	   └────┘   Resign / Run's ctx / panic; on a loss the row expires by itself
//	   sleeps until the release or the expiry the database reported
//
// OnElected's ctx ends at the leader's local deadline, before the row's
// expiry, so no other elector is elected while it runs; a graceful handover
// releases only after OnElected returned. Not guaranteed: a leader frozen
// past its margin may act after its row expired (VerifyTerm refuses its
// writes); a leader frozen inside a VerifyTerm transaction holds off the
// next election until the server ends it (bounded to the TTL); OnElected
// must honour its ctx; Members and Status are reports, the leader is read
// only from the leaders row.
//
// # What is not guaranteed
//
// Sentinel cannot make an external side effect exactly-once: if a worker
// dies inside fn, whether the effect happened is unknown, and Sentinel says
// so ([ErrUncertain]) instead of guessing. A fencing token protects only
// writes that check it (see [Client.VerifyToken] and the README's guarded
// write). Loss detection assumes the client's and the server's clocks run at
// the same rate (not that they agree); SafetyMargin absorbs drift and
// scheduling delay, and a process paused for longer than its margin is
// stopped by the token guard, not by Done. [WithForce] breaks the
// single-holder guarantee by design: it is for operators.
package sentinel
