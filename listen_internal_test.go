package sentinel

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The release notification payload round-trips any namespace and key,
// including ones containing the separator, and garbage never panics.
func FuzzParsePayload(f *testing.F) {
	f.Add("default", "invoice-123")
	f.Add("a:b", "c")
	f.Add("a", "b:c")
	f.Add("", "")
	f.Add("12:", "x")
	f.Add("zahlungen-über-€", "rechnung-ä")
	f.Add("日本", "キー")
	f.Fuzz(func(t *testing.T, ns, key string) {
		for _, kind := range []byte{notifyLease, notifyExecution} {
			payload := string(kind) + strconv.Itoa(len(ns)) + ":" + ns + key
			k, ok := parsePayload(payload)
			if !ok || k.kind != kind || k.ns != ns || k.key != key {
				t.Fatalf("parsePayload(%q) = %+v, %v; want %c %q, %q", payload, k, ok, kind, ns, key)
			}
		}
		// An older client's release has no kind.
		k, ok := parsePayload(strconv.Itoa(len(ns)) + ":" + ns + key)
		if !ok || k.kind != notifyLease || k.ns != ns || k.key != key {
			t.Fatalf("legacy payload: %+v, %v", k, ok)
		}
		_, _ = parsePayload(ns + key) // arbitrary input must not panic
	})
}

// A grant's wake-up (a lease's, a term's) is kept by the hub with the
// grant it carries until its waiter takes it; one that arrives before its waiter subscribed
// to the registration (it learns the registration's id only from the
// statement that made it) wakes the subscription at once; the kept ones
// are bounded.
func TestHubKeepsGrantWakeUps(t *testing.T) {
	ln := &listener{waiters: make(map[waitKey][]chan struct{})}
	h := &listenHub{members: []*listener{ln}}
	ln.hub = h
	woken := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	h.dispatch(waitKey{notifyLeaseGrant, "ns", "41"}, "9/1/2/") // nobody subscribed yet
	ch := make(chan struct{}, 1)
	ln.subscribeTo(notifyLeaseGrant, "ns", "41", ch)
	if !woken(ch) {
		t.Fatal("a grant's wake-up that came before the subscription was lost")
	}
	if data, ok := ln.takeGrant(notifyLeaseGrant, "ns", "41"); !ok || data != "9/1/2/" {
		t.Fatalf("takeGrant = %q, %v; want the grant the wake-up carried", data, ok)
	}
	if _, ok := ln.takeGrant(notifyLeaseGrant, "ns", "41"); ok {
		t.Fatal("a grant taken was kept")
	}

	late := make(chan struct{}, 1)
	ln.subscribeTo(notifyLeaseGrant, "ns", "42", late)
	h.dispatch(waitKey{notifyLeaseGrant, "ns", "42"}, "10/1/2/")
	if !woken(late) {
		t.Fatal("a subscribed waiter was not woken")
	}
	if data, ok := ln.takeGrant(notifyLeaseGrant, "ns", "42"); !ok || data != "10/1/2/" {
		t.Fatalf("takeGrant = %q, %v after a delivered wake-up", data, ok)
	}

	// A term's wake-up is kept the same way, apart from a lease's with
	// the same key (a member token and a registration id may be equal).
	h.dispatch(waitKey{notifyElectionGrant, "ns", "43"}, "12/1/2")
	term := make(chan struct{}, 1)
	ln.subscribeTo(notifyElectionGrant, "ns", "43", term)
	if !woken(term) {
		t.Fatal("a term's wake-up that came before the subscription was lost")
	}
	if _, ok := ln.takeGrant(notifyLeaseGrant, "ns", "43"); ok {
		t.Fatal("a term's wake-up was taken as a lease's")
	}
	if data, ok := ln.takeGrant(notifyElectionGrant, "ns", "43"); !ok || data != "12/1/2" {
		t.Fatalf("takeGrant(term) = %q, %v; want the grant the wake-up carried", data, ok)
	}

	for i := range 3 * maxKept {
		h.dispatch(waitKey{notifyLeaseGrant, "ns", "x" + strconv.Itoa(i)}, "")
	}
	if len(h.kept) > maxKept || len(h.keptFIFO) > 2*maxKept {
		t.Fatalf("kept %d wake-ups (%d in order), want at most %d", len(h.kept), len(h.keptFIFO), maxKept)
	}
	if _, ok := h.claim(waitKey{notifyLeaseGrant, "ns", "x" + strconv.Itoa(3*maxKept-1)}); !ok {
		t.Fatal("the newest wake-ups must be kept")
	}
	if _, ok := h.claim(waitKey{notifyLeaseGrant, "ns", "x0"}); ok {
		t.Fatal("the oldest wake-ups must be dropped")
	}
}

// A served turn's subscription ('s') is a fact the server sends, never a
// hint: a reconnection's wake-everyone must not signal it (its waiter would
// return as served), while the same waiter's re-check subscription is
// woken.
func TestWakeAllSparesServedSubscriptions(t *testing.T) {
	ln := &listener{waiters: make(map[waitKey][]chan struct{})}
	served, recheck := make(chan struct{}, 1), make(chan struct{}, 1)
	ln.subscribeTo(notifyTurnServed, "ns", "7", served)
	ln.subscribeTo(notifyTurn, "ns", "7", recheck)
	ln.wakeAll()
	select {
	case <-served:
		t.Fatal("wakeAll signalled a served-turn subscription")
	default:
	}
	select {
	case <-recheck:
	default:
		t.Fatal("wakeAll did not wake the re-check subscription")
	}
}

// A draw window trusts what the hub heard only while one LISTEN lasted
// and nothing kept for it was dropped; turn wake-ups are kept only while a
// draw is in flight, and forgotten with the last window.
func TestDrawWindow(t *testing.T) {
	h := &listenHub{healthy: true, gen: 1}
	s := func(ticket string) waitKey { return waitKey{notifyTurnServed, "ns", ticket} }
	tk := func(ticket string) waitKey { return waitKey{notifyTurn, "ns", ticket} }

	h.keepTurn(s("1")) // no draw in flight: not kept
	w := h.beginDraw()
	require.NotNil(t, w.h)
	heard, served, turn := h.endDraw(w, "ns", "1")
	require.True(t, heard)
	require.False(t, served || turn, "kept before the window opened")

	w = h.beginDraw()
	h.keepTurn(s("2"))
	h.keepTurn(tk("3"))
	heard, served, turn = h.endDraw(w, "ns", "2")
	require.True(t, heard)
	require.True(t, served)
	require.False(t, turn)
	require.Nil(t, h.turnKept, "forgotten with the last window")

	w = h.beginDraw()
	h.keepTurn(tk("4"))
	_, served, turn = h.endDraw(w, "ns", "4")
	require.False(t, served)
	require.True(t, turn, "a re-check kept: the waiter checks")

	// Another connection meanwhile: notifications may have been lost.
	w = h.beginDraw()
	h.gen++
	heard, _, _ = h.endDraw(w, "ns", "5")
	require.False(t, heard)

	// Down at the end of the window.
	w = h.beginDraw()
	h.healthy = false
	heard, _, _ = h.endDraw(w, "ns", "5")
	require.False(t, heard)
	// Opened while not listening: open (the hub must not retire under
	// it), never heard, even once listening again on the same connection
	// count (LISTEN becoming active moves gen, see connect).
	w = h.beginDraw()
	require.NotNil(t, w.h)
	heard, _, _ = h.endDraw(w, "ns", "5")
	require.False(t, heard, "opened while not listening")
	w = h.beginDraw()
	h.healthy, h.gen = true, h.gen+1
	heard, _, _ = h.endDraw(w, "ns", "5")
	require.False(t, heard, "opened before LISTEN became active")

	// A wake-up dropped to the bound while the window was open.
	older := h.beginDraw()
	h.keepTurn(s("6"))
	w = h.beginDraw()
	for i := range maxTurnKept - 1 {
		h.keepTurn(tk(strconv.Itoa(100 + i)))
	}
	heard, _, _ = h.endDraw(w, "ns", "7")
	require.True(t, heard, "only what was kept before the window was dropped")
	w = h.beginDraw()
	h.keepTurn(tk("99999"))
	h.keepTurn(tk("99998")) // over the bound: the oldest two go, 6 among them
	heard, _, _ = h.endDraw(w, "ns", "7")
	require.True(t, heard, "what was dropped was kept before this window opened")
	heard, served, _ = h.endDraw(older, "ns", "6")
	require.False(t, heard, "a wake-up kept during the window was dropped")
	require.False(t, served, "dropped")
	require.Zero(t, h.drawing)
}

// An idle hub retires only when nothing used it for the timeout, no draw
// is open and no member waits; a retired hub refuses every later use.
func TestHubRetiresOnlyWhenIdle(t *testing.T) {
	cancelled := 0
	ln := &listener{waiters: map[waitKey][]chan struct{}{}}
	h := &listenHub{members: []*listener{ln}, healthy: true, lastUse: time.Now().Add(-time.Hour),
		cancel: func() { cancelled++ }}
	k := waitKey{notifyLease, "ns", "k"}

	ln.waiters[k] = []chan struct{}{make(chan struct{}, 1)}
	require.False(t, h.retireIdle(time.Minute), "retired under a waiter")
	delete(ln.waiters, k)

	w := h.beginDraw()
	h.lastUse = time.Now().Add(-time.Hour)
	require.False(t, h.retireIdle(time.Minute), "retired under a draw")
	h.endDraw(w, "ns", "1")
	require.False(t, h.retireIdle(time.Minute), "retired right after a draw ended")

	h.lastUse = time.Now().Add(-time.Hour)
	require.True(t, h.use())
	require.False(t, h.retireIdle(time.Minute), "retired right after a use")

	h.lastUse = time.Now().Add(-time.Hour)
	require.Zero(t, cancelled)
	require.True(t, h.retireIdle(time.Minute))
	require.Equal(t, 1, cancelled, "the connection was not closed")
	require.False(t, h.isHealthy())
	require.False(t, h.use(), "a retired hub took a new wait")
	require.False(t, h.retireIdle(time.Minute), "retired twice")
	require.Equal(t, 1, cancelled)
}
