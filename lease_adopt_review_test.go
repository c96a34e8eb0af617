package sentinel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An adoption whose TTL's safety margin is longer than the time left
// before the lease's hard expiry would make a Lease that is past its
// deadline as it is returned: it ended at once, reported to
// Observer.LeaseLost (a loss of a lease nobody could have used), while
// the row stayed held, by this client's name and by nobody, until the
// hard expiry. AdoptHandle refuses it (ErrHardTTL) and gives the grant
// back: the key is free.
func TestAdoptHandleTooCloseToTheHardTTLIsGivenBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, worker := e.client(nil), e.client(w.config())
	h := detached(t, dispatcher, "job", sentinel.WithTTL(3*time.Second), sentinel.WithHardTTL(3*time.Second))
	// Its margin, a tenth of an hour, is far past the 3s left.
	l, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(time.Hour))
	if err == nil {
		t.Logf("adopted: Err %v, deadline in %s", l.Err(), time.Until(l.Deadline()))
		holder, herr := worker.Holder(ctx, "job")
		if herr == nil {
			t.Logf("the row is held by %s (token %d) until %s", holder.Owner, holder.Token, time.Until(holder.ExpiresAt))
		}
	}
	require.Error(t, err, "a lease past its deadline as it is returned")
	t.Log(err)
	require.Nil(t, l)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.False(t, errors.Is(err, sentinel.ErrStaleToken), "the handle was current: %v", err)
	_, err = worker.Holder(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was given back: the key is free")
	w.requireNoLoss(t)
}
