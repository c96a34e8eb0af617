package sentinel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// Programs that share a printer take turns on it, first come, first
// served. The ticket is a fencing token: the holder's writes check it.
func ExampleClient_Turn() {
	client, done := exampleClient("example_turn")
	defer done()
	ctx := context.Background()

	// Turn blocks until every ticket drawn before ours has finished, been
	// cancelled, or died. Bound the wait with ctx.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	turn, err := client.Turn(wctx, "printer", sentinel.WithLabel("nightly report"))
	if err != nil {
		fmt.Println("no turn:", err)
		return
	}
	defer turn.Release(ctx)

	// Work under the turn's context: it is cancelled if the turn is lost.
	work, stop := turn.Context(ctx)
	defer stop()
	_ = work
	fmt.Printf("printing %q with ticket %d\n", turn.Label(), turn.Ticket())

	// Output:
	// printing "nightly report" with ticket 1
}

// A status report, like turn's `status`: the holder and the queue behind
// it, with labels.
func ExampleClient_Queue() {
	client, done := exampleClient("example_queue_status")
	defer done()
	ctx := context.Background()

	holder, _ := client.Turn(ctx, "printer", sentinel.WithLabel("nightly report"))
	waiting := make(chan struct{})
	go func() {
		t, err := client.Turn(ctx, "printer", sentinel.WithLabel("invoices"))
		if err == nil {
			_ = t.Release(ctx)
		}
		close(waiting)
	}()
	for { // wait until the second ticket is drawn
		q, _ := client.Queue(ctx, "printer")
		if len(q.Waiting) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	q, _ := client.Queue(ctx, "printer")
	fmt.Printf("%s: holder %d %q\n", q.Resource, q.Holder.Ticket, q.Holder.Label)
	for _, w := range q.Waiting {
		fmt.Printf("%s: waiting %d %q\n", q.Resource, w.Ticket, w.Label)
	}
	_ = holder.Release(ctx)
	<-waiting

	// Output:
	// printer: holder 1 "nightly report"
	// printer: waiting 2 "invoices"
}

// Following a queue's progression, like turn's `follow`. A follower
// started in a goroutine may take its position after the next statement
// of the caller; WithAfterEvent(0) replays the recorded history first, so
// nothing is missed (pass the last QueueEvent.ID seen to resume).
func ExampleClient_FollowQueues() {
	client, done := exampleClient("example_queue_follow")
	defer done()
	ctx := context.Background()

	fctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		n := 0
		_ = client.FollowQueues(fctx, []string{"printer"}, func(e sentinel.QueueEvent) error {
			fmt.Println(e)
			if n++; n == 3 {
				stop()
			}
			return nil
		}, sentinel.WithAfterEvent(0))
	}()

	t, _ := client.Turn(ctx, "printer", sentinel.WithLabel("nightly report"))
	_ = t.Release(ctx)
	<-followed

	// Output:
	// printer: 1 assigned to "nightly report"
	// printer: 1 granted
	// printer: 1 completed by "nightly report"
}

// Holding several resources at once, like turn's console `lock`: turns are
// taken in sorted order, so two programs locking overlapping sets never
// deadlock, and a failure gives back what was taken.
func ExampleClient_TurnAll() {
	client, done := exampleClient("example_turn_all")
	defer done()
	ctx := context.Background()

	set, err := client.TurnAll(ctx, []string{"scanner", "printer"}, sentinel.WithLabel("month end"))
	if err != nil {
		fmt.Println("no turns:", err)
		return
	}
	for _, t := range set.Turns() {
		fmt.Println(t.Resource(), t.Ticket())
	}
	_ = set.Release(ctx)

	// Output:
	// printer 1
	// scanner 2
}
