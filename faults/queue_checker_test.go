package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// The queue checker accepts a legal history and rejects each kind of
// broken one: it can fail.
func TestQueueCheckerRejectsBrokenHistories(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(id, ticket int64, typ string, ms int) qevent {
		return qevent{id: id, ticket: ticket, typ: typ, at: at(ms)}
	}
	// Tickets 1, 2, 3: 1 served and completed, 2 dies waiting and is
	// bumped by 3, 3 served and completed.
	legal := func() queueHistory {
		return queueHistory{
			events: []qevent{
				ev(1, 1, sentinel.QueueAssigned, 0),
				ev(2, 1, sentinel.QueueGranted, 1),
				ev(3, 2, sentinel.QueueAssigned, 2),
				ev(4, 3, sentinel.QueueAssigned, 3),
				ev(5, 1, sentinel.QueueCompleted, 50),
				ev(6, 2, sentinel.QueueBumped, 900),
				ev(7, 3, sentinel.QueueGranted, 900),
				ev(8, 3, sentinel.QueueCompleted, 950),
			},
			writes: []qwrite{{1, at(10)}, {1, at(20)}, {3, at(910)}},
			served: map[int64]bool{1: true, 3: true},
			dones:  []queueDone{{ticket: 1, kind: "released", deadline: t0.Add(40 * time.Millisecond).UnixNano()}},
		}
	}
	var v violations
	checkQueueHistory(legal(), 2*time.Second, &v)
	if v.count() != 0 {
		t.Fatalf("legal history rejected: %v", v.list)
	}
	broken := map[string]func(h *queueHistory){
		"grant out of ticket order": func(h *queueHistory) {
			h.events[6].ticket, h.events[1].ticket = 1, 3 // 3 granted first, then 1
		},
		"FIFO: lower ticket still waiting": func(h *queueHistory) {
			h.events[5], h.events[6] = ev(6, 3, sentinel.QueueGranted, 900), ev(7, 2, sentinel.QueueBumped, 901)
		},
		"FIFO: lower ticket never left": func(h *queueHistory) {
			h.events = append(h.events[:5], h.events[6:]...) // 2 never bumped
		},
		"write goes back to a lower ticket": func(h *queueHistory) {
			h.writes = append(h.writes, qwrite{1, at(920)})
		},
		"write after the next grant": func(h *queueHistory) {
			h.writes[1].at = at(905)
		},
		"write before its grant": func(h *queueHistory) {
			h.writes[2].at = at(899)
		},
		"write of a ticket never granted": func(h *queueHistory) {
			h.writes = append(h.writes, qwrite{4, at(960)})
		},
		"served without a grant event": func(h *queueHistory) {
			h.served[2] = true
		},
		"lost holder trusted past the next grant": func(h *queueHistory) {
			h.dones = append(h.dones, queueDone{ticket: 1, kind: "lost", deadline: at(901).UnixNano()})
		},
		"stall between grants": func(h *queueHistory) {
			for i := range h.events[5:] {
				h.events[5+i].at = h.events[5+i].at.Add(5 * time.Second)
			}
			for i := range h.writes[2:] {
				h.writes[2+i].at = h.writes[2+i].at.Add(5 * time.Second)
			}
		},
		"ticket ended twice": func(h *queueHistory) {
			h.events = append(h.events, ev(9, 3, sentinel.QueueCrashed, 960))
		},
	}
	for name, breakIt := range broken {
		h := legal()
		breakIt(&h)
		var v violations
		checkQueueHistory(h, 2*time.Second, &v)
		if v.count() == 0 {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.list, "; "))
		}
	}
}
