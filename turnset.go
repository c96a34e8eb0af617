package sentinel

// This file: TurnSet and Client.TurnAll: turns on several resources, taken in sorted order.

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// TurnSet is a turn on each of several resources, taken in sorted order
// (see Client.TurnAll).
type TurnSet struct {
	turns []*Turn
	done  chan struct{}
	once  sync.Once
}

// TurnAll takes a turn on every resource (duplicates are taken once), one
// after the other in sorted (byte) order, so that callers that use TurnAll
// on overlapping sets never deadlock. If any Turn fails (ctx ends, bad
// input, client closed), or a turn taken first was lost while a later one
// was waited for (an error matching ErrLeaseLost), every turn already
// taken is released and the error returned. `sentinel queue lock` runs
// it. Options: as for Turn; they apply to every ticket. A nil ctx is
// refused (ErrInvalid).
func (c *Client) TurnAll(ctx context.Context, resources []string, opts ...Option) (*TurnSet, error) {
	if err := checkCtx("Client.TurnAll", ctx); err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		return nil, invalid("resources", "must not be empty")
	}
	sorted := slices.Clone(resources)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var o callOptions
	for _, r := range sorted {
		var err error
		if o, err = c.resolveTurn("TurnAll", r, opts, takesTTL|takesLabel); err != nil {
			return nil, err
		}
	}
	s := &TurnSet{done: make(chan struct{})}
	for _, r := range sorted {
		t, err := c.turn(ctx, r, o)
		if err != nil {
			_ = s.Release(ctx)
			return nil, err
		}
		s.turns = append(s.turns, t)
	}
	// A turn taken first may have been lost while a later one was
	// waited for (its renewals failed for a TTL): the set is not whole.
	for _, t := range s.turns[:len(s.turns)-1] {
		if err := t.Err(); err != nil {
			_ = s.Release(ctx)
			return nil, fmt.Errorf("sentinel: turn on %q/%q lost while waiting for the next resource; every turn of the set released, take them again with TurnAll: %w",
				t.Namespace(), t.Resource(), err)
		}
	}
	for _, t := range s.turns {
		go func() {
			<-t.Done()
			s.once.Do(func() { close(s.done) })
		}()
	}
	return s, nil
}

// Turns returns the turns, in the order they were taken (sorted by resource).
func (s *TurnSet) Turns() []*Turn { return slices.Clone(s.turns) }

// Done is closed when any of the turns ends.
func (s *TurnSet) Done() <-chan struct{} { return s.done }

// Err returns the first turn's error, in resource order (nil while all are
// held).
func (s *TurnSet) Err() error {
	for _, t := range s.turns {
		if err := t.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Context returns a copy of parent cancelled, with Err as its cause, when
// any of the turns ends: already cancelled when one has ended, or its
// deadline has passed (see Turn.Err), before Context returns.
// A nil parent is refused: the ctx returned is already cancelled, its
// cause an error matching ErrInvalid.
func (s *TurnSet) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		return nilParent("TurnSet.Context")
	}
	ctx, cancel := context.WithCancelCause(parent)
	if err := s.Err(); err != nil {
		// Ended, or past a deadline (Err ends it): cancelled before the
		// caller can look, not by the goroutine some time later.
		cancel(err)
		return ctx, func() {}
	}
	go func() {
		select {
		case <-s.done:
			cancel(s.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Release releases every turn, in reverse order (the last resource
// first), and returns the first error in that order (see Turn.Release).
// A nil ctx is refused (ErrInvalid) and every turn left as it was.
func (s *TurnSet) Release(ctx context.Context) error {
	if err := checkCtx("TurnSet.Release", ctx); err != nil {
		return err
	}
	var first error
	for i := len(s.turns) - 1; i >= 0; i-- {
		if err := s.turns[i].Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
