// Package sentinel makes correctness-sensitive work safe across competing
// workers, with PostgreSQL as its only server: payments that must not charge
// twice, webhooks that must not be processed twice, jobs that must have one
// owner.
//
// The guides in the repository's docs/ directory answer one job each
// (docs/once.md, docs/http.md, docs/leases.md, docs/election.md,
// docs/queue.md, docs/operating.md, docs/testing.md); this documentation
// is the reference. Every primitive below has a runnable example.
//
// # The API at a glance
//
// The client:
//   - [New] makes a [Client] over a pgx pool, with a [Config] (namespace,
//     schema, TTLs, heartbeat, logger, [Observer]); [Client.Migrate],
//     [MigrateTx] and [MigrationFS] create or upgrade its schema.
//   - Options ([Option]) tune one call: [WithTTL], [WithHardTTL], [WithWait],
//     [WithNamespace], [WithToken], [WithLabel], [WithCodec], [WithForce].
//
// At most once, with cached replay:
//   - [Once] runs fn once per key and returns a [Result]; fn returns
//     [Final] for an outcome that is not a doubt, [Retryable] when nothing
//     happened. A crash inside fn leaves the key uncertain ([ErrUncertain]).
//   - [OnceTx] and [OnceSQLTx]: exactly once for writes to the same database.
//   - [OnceRetry] and [Retry]: retries only what is safe ([ShouldRetry],
//     [RetryOptions], [RetryError]).
//   - [TokenFromContext] and [Client.VerifyExecutionToken] fence fn's writes.
//
// Settling what is uncertain:
//   - [Client.Inspect] reads an [Execution], [Client.LastRun] the events
//     of its latest run, [Client.History] all of them or the newest
//     ([WithLimit]) ([Event]).
//   - [Client.Reconcile], then [Client.ForceComplete] (it happened) or
//     [Client.ResetToClaimed] (it did not); [Client.SetResult].
//   - [RegisterResultType] declares the type a key space holds, so an
//     operator's value that does not fit is refused ([ResultTypeError]).
//
// Leases and fencing:
//   - [Client.Lease] grants a [Lease]: [Lease.Token] is its fencing token,
//     [Lease.Done] closes when it is lost, [Lease.Release] gives it back.
//   - [Client.Do] runs fn while holding a lease; [Client.Holder] and
//     [Client.Leases] read who holds what ([Holder]); [Lease.Detach]
//     hands a lease to another process as a [LeaseHandle], which
//     [Client.AdoptHandle] takes up there as a Lease of its own (or
//     [Client.RenewHandle] and [Client.ReleaseHandle] act on).
//   - [Client.VerifyToken] guards a write with a lease's token in your
//     transaction ([StaleTokenError]).
//
// Leader election:
//   - [Client.Elector] makes an [Elector] ([ElectorOptions]); [Elector.Run]
//     campaigns, leads and follows; [Elector.Term] is a fencing token,
//     checked by [Client.VerifyTerm].
//   - [Client.Leader], [Client.Members] and [Client.Elections] read a group
//     without joining it ([Leader], [Member], [Election]).
//
// A fair queue:
//   - [Client.Turn] waits its [Turn] on a resource, first come, first served;
//     [Turn.Ticket] is a fencing token ([Client.VerifyTurn]);
//     [Client.TurnAll] takes several ([TurnSet]).
//   - [Client.Queue], [Client.Queues], [Client.QueueHistory],
//     [Client.FollowQueues] and [Client.ResetQueue] show and tend the queues
//     ([QueueStatus], [QueueEvent]).
//
// For operators:
//   - [Client.Executions] lists executions ([ExecutionFilter]),
//     [Client.ExecutionCounts], [Client.UncertainCounts] and
//     [Client.AttentionCounts] count them
//     ([StateCount]), [Client.Follow] streams events as they commit
//     ([FollowFilter]).
//   - [Client.Prune] deletes what is old ([PruneResult], [MinRetention]).
//   - [Observer] carries metrics and traces (package otelsentinel fills it
//     for OpenTelemetry).
//
// Errors match with [errors.Is]: [ErrInvalid], [ErrNotAcquired],
// [ErrLeaseLost], [ErrStaleToken], [ErrInProgress], [ErrUncertain],
// [ErrReconciling], [ErrFinal], [ErrWrongState], [ErrNotFound],
// [ErrNoLeader], [ErrNotMigrated], [ErrResult] ([ErrResultLost]), [ErrClosed]; their struct
// forms carry the details for [errors.As] ([HeldError], [ExecutionError],
// [FinalError], [StaleTokenError], [InvalidError]).
//
// Beside this package: idempotency (Idempotency-Key middleware for
// net/http), console (the reconciliation page), sentineltest (a throwaway
// PostgreSQL for your tests), otelsentinel (OpenTelemetry), and the
// sentinel command (cmd/sentinel).
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
//	   │  │ release (owner+token guard; expires it)          │  │ renew (owner+token+unexpired
//	   │  └──────────────────────────────────────────────────┘  │ guard, never past hard TTL)
//	   │                 expiry by the database clock           │
//	   └────────────────────────────────────────────────────────┘
//
// A release wakes (NOTIFY, sent after its commit) only when someone waits
// for the key: it hands the lease to the oldest waiter in the same
// statement; a release nobody waits for sends nothing. A client renews all
// its leases in one statement per tick from one goroutine. The holder trusts its lease only until (send time of the last
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
// is one statement that only reads: a primary-key read when the client has
// seen the key completed, else the same claim statement. Concurrent
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
//	   │    ▲   OnElected's ctx ends; after it returned: release (NOTIFY if followers wait) on
//	   └────┘   Resign / Run's ctx / Client.Close / panic; on a loss by the local deadline
//	            the release is still tried until the row's expiry, else it expires by itself
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
// writes that check it (see [Client.VerifyToken], and docs/leases.md for
// a fence column in any store). Loss detection assumes the client's and the server's clocks run at
// the same rate (not that they agree); SafetyMargin absorbs drift and
// scheduling delay, and a process paused for longer than its margin is
// stopped by the token guard, not by Done. [WithForce] breaks the
// single-holder guarantee by design: it is for operators.
package sentinel
