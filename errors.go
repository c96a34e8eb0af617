package sentinel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors, for errors.Is. Each is usually wrapped in a struct error
// that carries the facts (holder, state, token, expiry), for errors.As.
var (
	// ErrInvalid reports bad input: an empty or oversized key, a bad
	// namespace, inconsistent timing. Nothing was written.
	ErrInvalid = errors.New("sentinel: invalid argument")

	// ErrNotAcquired reports that a lease is held by another owner. The
	// error is a *HeldError naming the holder.
	ErrNotAcquired = errors.New("sentinel: lease held by another owner")

	// ErrLeaseLost reports that a lease could not be renewed before its local
	// deadline, was taken over, or reached its hard TTL. The holder must stop
	// the work it guards.
	ErrLeaseLost = errors.New("sentinel: lease lost")

	// ErrHardTTL reports that a lease or execution reached its hard TTL. It
	// always comes together with ErrLeaseLost.
	ErrHardTTL = errors.New("sentinel: hard TTL reached")

	// ErrReleased is the reason given by Lease.Err after Release.
	ErrReleased = errors.New("sentinel: lease released")

	// ErrStaleToken reports that a fencing token is no longer the current
	// token for its key (or its lease expired).
	ErrStaleToken = errors.New("sentinel: stale fencing token")

	// ErrClosed reports a call on a closed Client.
	ErrClosed = errors.New("sentinel: client closed")

	// ErrInProgress reports that another worker holds a live claim on a Once
	// key. The error is an *ExecutionError.
	ErrInProgress = errors.New("sentinel: execution in progress")

	// ErrUncertain reports that a Once key crossed the execution boundary and
	// its outcome is unknown (the executor died, failed, or lost its lease).
	// Sentinel never runs it again by itself; see Client.Reconcile. The
	// error is an *ExecutionError.
	ErrUncertain = errors.New("sentinel: execution outcome uncertain; reconcile it")

	// ErrReconciling reports that an operator is reconciling a Once key.
	ErrReconciling = errors.New("sentinel: execution is being reconciled")

	// ErrNotFound reports that a key has no execution or lease.
	ErrNotFound = errors.New("sentinel: not found")

	// ErrWrongState reports that a reconciliation step's precondition does
	// not hold. The error is an *ExecutionError with the current state.
	ErrWrongState = errors.New("sentinel: execution is not in the required state")

	// ErrResult reports that a result could not be encoded, decoded or
	// stored. When encoding fails after fn succeeded the key is still
	// recorded as completed (without a result).
	ErrResult = errors.New("sentinel: result codec failed")
)

// InvalidError describes bad input. It matches ErrInvalid.
type InvalidError struct {
	Field  string // the offending parameter, e.g. "key", "TTL"
	Reason string // what is wrong and what is allowed
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("sentinel: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Holder describes who holds a lease.
type Holder struct {
	Namespace     string
	Key           string
	Owner         string
	Host          string
	PID           int
	Token         int64
	AcquiredAt    time.Time // database clock
	ExpiresAt     time.Time // database clock; renewed by heartbeats
	HardExpiresAt time.Time // database clock; zero when the lease has no hard TTL

	localExpiry time.Time // ExpiresAt translated to the local monotonic clock
}

// HeldError reports a lease held by someone else. It matches ErrNotAcquired.
// Holder is nil when the holder changed while the call ran.
type HeldError struct {
	Namespace string
	Key       string
	Holder    *Holder
}

func (e *HeldError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("sentinel: lease %q/%q held by another owner", e.Namespace, e.Key)
	}
	return fmt.Sprintf("sentinel: lease %q/%q held by %s (host %s, pid %d, token %d) until %s",
		e.Namespace, e.Key, e.Holder.Owner, e.Holder.Host, e.Holder.PID, e.Holder.Token,
		e.Holder.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrNotAcquired.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// LostError says why a lease or execution lease was lost. It matches
// ErrLeaseLost, and ErrHardTTL when the hard TTL was the reason.
type LostError struct {
	Namespace string
	Key       string
	Token     int64
	Reason    string // "renewal deadline passed", "taken over", "hard TTL reached"
	Cause     error  // the last renewal error, or ErrHardTTL; may be nil
}

func (e *LostError) Error() string {
	s := fmt.Sprintf("sentinel: lease %q/%q (token %d) lost: %s", e.Namespace, e.Key, e.Token, e.Reason)
	if e.Cause != nil && !errors.Is(e.Cause, ErrHardTTL) {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns ErrLeaseLost and the cause.
func (e *LostError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrLeaseLost}
	}
	return []error{ErrLeaseLost, e.Cause}
}

// ExecutionError carries the state of a Once key when a call could not run
// or complete it. It matches one of ErrInProgress, ErrUncertain,
// ErrReconciling, ErrWrongState (Kind), and Cause when set.
type ExecutionError struct {
	Kind           error // ErrInProgress, ErrUncertain, ErrReconciling or ErrWrongState
	Namespace      string
	Key            string
	State          State
	Owner          string
	Token          int64
	LeaseExpiresAt time.Time // database clock; zero when none
	Since          time.Time // when the key entered State (database clock)
	Cause          error     // why, when known (e.g. the lease was lost)
}

func (e *ExecutionError) Error() string {
	s := fmt.Sprintf("%s: key %q/%q is %s (owner %s, token %d", e.Kind.Error(), e.Namespace, e.Key, e.State, e.Owner, e.Token)
	if !e.LeaseExpiresAt.IsZero() {
		s += ", lease until " + e.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	s += ")"
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns Kind and Cause.
func (e *ExecutionError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// StaleTokenError reports a fencing token that is no longer current. It
// matches ErrStaleToken.
type StaleTokenError struct {
	Namespace string
	Key       string
	Token     int64 // the token that was checked
	Current   int64 // the current token, 0 when the key is free or expired
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("sentinel: stale fencing token %d for %q/%q (current %d)", e.Token, e.Namespace, e.Key, e.Current)
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// transient reports whether err is a connection-level failure that a later
// attempt may not meet: the server unreachable, restarting or shutting
// down, a dropped connection. It is the one place Sentinel maps pgx/pgconn
// errors; statement errors (a missing schema, a constraint) are never
// transient.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, cannot connect now
			return true
		}
		return false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.As(err, &connErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
