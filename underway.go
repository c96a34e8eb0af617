package sentinel

// This file: the work under way that Client.Close waits for (underWay): the Electors' terms until Run released them (Client.terms), and the Turns' draws in flight and the give-backs of draws that ended unheard (cutOffs, queue_cutoff.go).

import (
	"context"
	"sync"
)

// underWay counts work under way that Client.Close waits for, until its
// deadline, once it stops counting more in.
//
// Client.terms counts the terms of this client's Electors from their
// grant to the end of their release by Run (Elector.lead). Close ends
// each term it finds held (Run sees it, cancels OnElected's ctx, waits
// for OnElected to return and releases the term) and waits for them: so
// a service's main that cancels Run's ctx, calls Close and returns hands
// leadership over when OnElected returns, not a TTL later, should Run's
// release still be under way as Close returns and the process exits. A
// term still under way at the deadline (an OnElected that does not
// return when its ctx ends, or Close called from OnElected itself) is
// released by Run when it can, or expires within its TTL.
type underWay struct {
	mu     sync.Mutex
	n      int
	closed bool          // Close stopped counting in
	idle   chan struct{} // set by close: closed once none is left
}

// add counts one in, running locked (if not nil) under the lock first;
// it reports false, counting nothing and running nothing, once Close
// stopped counting in.
func (u *underWay) add(locked func()) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	if locked != nil {
		locked()
	}
	u.n++
	return true
}

// done counts one out.
func (u *underWay) done() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.n == 0 && u.idle != nil {
		close(u.idle)
		u.idle = nil
	}
}

// close, called by Client.Close, stops counting in (running locked, if
// not nil, under the lock as it does) and waits until none is under way
// or ctx (Close's deadline) ends.
func (u *underWay) close(ctx context.Context, locked func()) {
	u.mu.Lock()
	u.closed = true
	if locked != nil {
		locked()
	}
	var idle chan struct{}
	if u.n > 0 {
		idle = make(chan struct{})
		u.idle = idle
	}
	u.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
}
