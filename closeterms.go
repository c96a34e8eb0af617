package sentinel

// This file: the Electors' terms under way, which Client.Close waits for: a term is released by its Elector's Run once OnElected returned, and a process that exits right after Close would otherwise leave it live until it expired.

import (
	"context"
	"sync"
)

// termsUnderWay counts the terms of this client's Electors from their
// grant to the end of their release by Run (Elector.lead). Client.Close
// ends each term it finds held (Run sees it, cancels OnElected's ctx,
// waits for OnElected to return and releases the term) and waits for
// them until its deadline: so a service's main that cancels Run's ctx,
// calls Close and returns hands leadership over when OnElected returns,
// not a TTL later, should Run's release still be under way as Close
// returns and the process exits.
type termsUnderWay struct {
	mu     sync.Mutex
	n      int
	closed bool          // Close passed its wait: none is waited for any more
	idle   chan struct{} // set by wait: closed once none is left
}

// add counts a term in; it reports false (not counted) once Close passed
// its wait.
func (s *termsUnderWay) add() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.n++
	return true
}

// done counts a term out: its release is over (or failed).
func (s *termsUnderWay) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.n == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// wait, called by Client.Close, waits until no term is under way or ctx
// (Close's deadline) ends. A term still under way then (an OnElected that
// does not return when its ctx ends, or Close called from OnElected
// itself) is released by Run when it can, or expires within its TTL.
func (s *termsUnderWay) wait(ctx context.Context) {
	s.mu.Lock()
	if s.n == 0 {
		s.closed = true
		s.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	s.idle = idle
	s.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.closed = true
	s.idle = nil
	s.mu.Unlock()
}
