package sentinel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Only a lease lost to its renewal deadline said what the loss means for
// the work done under it. A lease lost to its hard TTL or found taken
// over, a Once's execution lease and an elector's term, lost, read
// "lost: hard TTL reached" or "lost: taken over, released or expired" and
// nothing more: whoever reads it in a log cannot tell whether the work
// may have run twice. Each now says what is true for what was held.
func TestLostErrorOfEveryKindSaysWhatItMeansForTheWork(t *testing.T) {
	const lease = ` (another holder may have taken the key: writes fenced by token 3 (VerifyToken, a conditional write) cannot have overlapped another holder's, unfenced ones may have)`
	stale := func(cur int64) error {
		return &sentinel.StaleTokenError{Namespace: "ns", Key: "k", Token: 3, Current: cur}
	}
	for _, tc := range []struct {
		kind   sentinel.LossKind
		reason string
		cause  error
		want   string
	}{
		{"", "hard TTL reached", sentinel.ErrHardTTL, `sentinel: lease "ns"/"k" (token 3) lost: hard TTL reached` + lease},
		{sentinel.LossLease, "hard TTL reached", sentinel.ErrHardTTL, `sentinel: lease "ns"/"k" (token 3) lost: hard TTL reached` + lease},
		{sentinel.LossLease, "taken over, released or expired", stale(0), `sentinel: lease "ns"/"k" (token 3) lost: taken over, released or expired` + lease},
		// Who holds it now is said once, as the clause's subject.
		{sentinel.LossLease, "taken over, released or expired", stale(4),
			`sentinel: lease "ns"/"k" (token 3) lost: taken over, released or expired (token 4 holds it now: writes fenced by token 3 (VerifyToken, a conditional write) cannot have overlapped another holder's, unfenced ones may have)`},
		{sentinel.LossLease, "expired or taken over before release", stale(0), `sentinel: lease "ns"/"k" (token 3) lost: expired or taken over before release` + lease},
		{sentinel.LossLeader, "renewal deadline passed", nil,
			`sentinel: leadership of group "ns"/"k" (term 3) lost: renewal deadline passed (another elector may lead now: writes fenced by term 3 (VerifyTerm) cannot have overlapped another leader's, unfenced ones may have)`},
		{sentinel.LossLeader, "taken over, released or expired", stale(4),
			`sentinel: leadership of group "ns"/"k" (term 3) lost: taken over, released or expired (term 4 holds it now: writes fenced by term 3 (VerifyTerm) cannot have overlapped another leader's, unfenced ones may have)`},
		// A hand-made execution loss: whether fn may run again depends on
		// the call (Once, WithRerun, OnceTx), unknown here.
		{sentinel.LossExecution, "hard TTL reached", sentinel.ErrHardTTL,
			`sentinel: lease "ns"/"k" (token 3) lost: hard TTL reached (writes fenced by token 3 (VerifyExecutionToken) are refused once the lease expires on the database clock)`},
		// Not a loss of the key to another: nothing added.
		{sentinel.LossLease, "client closed", sentinel.ErrClosed, `sentinel: lease "ns"/"k" (token 3) lost: client closed: sentinel: client closed`},
		{sentinel.LossMember, "hard TTL reached", sentinel.ErrHardTTL, `sentinel: membership of group "ns"/"k" (member token 3) lost: hard TTL reached`},
	} {
		err := &sentinel.LostError{Namespace: "ns", Key: "k", Token: 3, Kind: tc.kind, Reason: tc.reason, Cause: tc.cause}
		require.Equal(t, tc.want, err.Error())
		require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	}
}

// The library's own losses, of each kind, say it.
func TestLostLeaseTermAndExecutionSayWhatItMeansForTheWork(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	hard := []sentinel.Option{sentinel.WithTTL(time.Second), sentinel.WithHardTTL(1500 * time.Millisecond)}

	// A lease lost to its hard TTL.
	l, err := c.Lease(ctx, "hard", hard...)
	require.NoError(t, err)
	<-l.Done()
	require.ErrorIs(t, l.Err(), sentinel.ErrHardTTL)
	for _, err := range []error{l.Err(), l.Release(ctx)} {
		require.Contains(t, err.Error(), "lost: hard TTL reached (another holder may have taken the key: writes fenced by token")
		require.Contains(t, err.Error(), "unfenced ones may have)")
	}

	// A lease found taken over by its renewal.
	l, err = c.Lease(ctx, "took", sentinel.WithTTL(2*time.Second))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("leases")+" SET expires_at = clock_timestamp() WHERE key = 'took'")
	require.NoError(t, err)
	l2, err := e.client(nil).Lease(ctx, "took", sentinel.WithWait())
	require.NoError(t, err)
	defer l2.Release(ctx)
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease taken over did not end")
	}
	require.ErrorIs(t, l.Err(), sentinel.ErrStaleToken)
	require.Contains(t, l.Err().Error(), "lost: taken over, released or expired (another holder may have taken the key: writes fenced by token")

	// A Once's execution lease: without WithRerun nobody runs fn again.
	var cause error
	_, err = sentinel.Once(ctx, c, "once", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return 0, ctx.Err()
	}, hard...)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	for _, err := range []error{err, cause} {
		require.Contains(t, err.Error(), "lost: hard TTL reached (no other call runs fn for the key (it is left to an operator): writes fenced by token", "%v", err)
		require.Contains(t, err.Error(), "(VerifyExecutionToken) are refused once the lease expires on the database clock)")
	}
	// With WithRerun and an attempt left, a re-run may.
	_, err = sentinel.Once(ctx, c, "rerun", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, append(hard, sentinel.WithRerun(3))...)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Contains(t, err.Error(), "lost: hard TTL reached (a Once call with WithRerun may run fn again once the lease expires: writes fenced by token", "%v", err)
	require.Contains(t, err.Error(), "unfenced ones may have overlapped that re-run)")
	// OnceTx: the next call may run fn again; the transaction's writes
	// land at most once.
	_, err = sentinel.OnceTx(ctx, c, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		<-ctx.Done()
		return 1, nil
	}, hard...)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.Contains(t, err.Error(), "lost: hard TTL reached (the next call may run fn again once the claim expires: "+
		"fn's transaction commits only with a completion its token's guard accepts, so at most one attempt's writes land; work outside it may have overlapped)", "%v", err)

	// An elector's term, its row expired under it.
	causes := make(chan error, 4)
	el, err := e.client(&sentinel.Config{DefaultTTL: time.Second}).Elector("termmeans", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
		},
	})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("leaders")+" SET expires_at = clock_timestamp() WHERE election = 'termmeans'")
	require.NoError(t, err)
	select {
	case cause = <-causes:
	case <-time.After(10 * time.Second):
		t.Fatal("OnElected's ctx did not end")
	}
	msg := cause.Error()
	require.Contains(t, msg, "lost: taken over, released or expired (another elector may lead now: writes fenced by term ", msg)
	require.Contains(t, msg, "(VerifyTerm) cannot have overlapped another leader's, unfenced ones may have)")
	require.Equal(t, 1, strings.Count(msg, "lost"), msg)
}
