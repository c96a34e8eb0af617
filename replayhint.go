package sentinel

// This file: the keys a client saw completed (replayHints), so that their replays read the row with a primary-key read instead of sending the claim.

import "sync"

// maxReplayHints bounds the keys a client remembers as completed: a few
// hundred kilobytes at most, the oldest forgotten first.
const maxReplayHints = 4096

// replayHints remembers the Once keys this client saw completed: ones it
// completed itself (Once's completion, the commit of OnceTx's
// transaction), and ones a claim statement returned completed. A
// completed key stays completed unless an operator or Prune changes it,
// so a replay of a remembered key is most likely a replay again: begin
// then reads the row (sqlReadExecution, a primary-key read through the
// coalescer's read lane) instead of sending the claim statement, which
// costs a replay about 1.3-1.8x that read (its plan carries the claim's
// writes, though it does not run them; docs/benchmarks-history.md).
//
// A hint is only a guess about which statement to send first, never an
// outcome: the replay is decided by the row the read returns, exactly as
// the claim statement would return it for a completed key (the claim
// writes nothing then). A read that finds the key in any other state, or
// no row at all, drops the hint and the call sends the claim as it
// would have without one: one round trip more, only when the guess was
// wrong.
type replayHints struct {
	mu   sync.Mutex
	keys map[hintKey]struct{}
	fifo []hintKey // insertion order, for eviction
	next int       // the oldest entry of fifo once it is full
}

type hintKey struct{ ns, key string }

// has reports whether ns/key was seen completed.
func (h *replayHints) has(ns, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.keys[hintKey{ns, key}]
	return ok
}

// add remembers ns/key as completed, forgetting the oldest key beyond
// maxReplayHints.
func (h *replayHints) add(ns, key string) {
	k := hintKey{ns, key}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.keys[k]; ok {
		return
	}
	if h.keys == nil {
		h.keys = make(map[hintKey]struct{})
	}
	if len(h.fifo) < maxReplayHints {
		h.fifo = append(h.fifo, k)
	} else {
		delete(h.keys, h.fifo[h.next])
		h.fifo[h.next] = k
		h.next = (h.next + 1) % maxReplayHints
	}
	h.keys[k] = struct{}{}
}

// drop forgets ns/key (its row was found in another state, or gone). Its
// slot in fifo stays until it is reused: a key dropped and added again
// may then be forgotten early, which costs a replay the claim statement,
// nothing else.
func (h *replayHints) drop(ns, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.keys, hintKey{ns, key})
}
