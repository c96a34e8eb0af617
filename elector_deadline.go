package sentinel

// This file: Elector.Deadline: when the current term ends unless renewed.

import "time"

// Deadline returns the local time (monotonic clock) until which this
// elector may trust its current term, moving forward with every renewal;
// zero while it does not lead. Work done as leader must stop by then: a
// follower can be elected once the term expires on the database clock,
// which is the safety margin later.
func (e *Elector) Deadline() time.Time {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || t.stepping.Load() || t.lease.ended() != nil {
		return time.Time{}
	}
	// Past the deadline the term is not to be trusted, though the timer
	// that ends the lease may not have fired yet: IsLeader is false then,
	// and Deadline agrees with it.
	d := t.lease.Deadline()
	if !time.Now().Before(d) {
		return time.Time{}
	}
	return d
}
