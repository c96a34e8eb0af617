package sentinel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A lease lost to its renewal deadline (a frozen process, a database
// unreachable for a TTL) read "lease ... lost: renewal deadline passed",
// which did not say what that means for the work done under it: another
// holder may have taken the key and worked at the same time, so only the
// writes fenced by the token are known not to have overlapped. Release's
// error, and Err's, now say so; what they match is unchanged.
func TestLeaseLostToItsDeadlineSaysWhatItMeansForTheWork(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Second, SafetyMargin: 250 * time.Millisecond})
	l, err := c.Lease(ctx, "press")
	require.NoError(t, err)
	// Its renewals are held off (the row locked) past its deadline.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'press' FOR UPDATE")
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done did not close")
	}
	require.NoError(t, tx.Rollback(ctx))
	l2, err := e.client(nil).Lease(ctx, "press", sentinel.WithWait())
	require.NoError(t, err, "another client takes the key")
	defer l2.Release(ctx)

	err = l.Release(ctx)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	var lost *sentinel.LostError
	require.True(t, errors.As(err, &lost), "%v", err)
	require.Equal(t, "renewal deadline passed", lost.Reason)
	for _, e := range []error{err, l.Err()} {
		msg := e.Error()
		require.True(t, strings.HasPrefix(msg, `sentinel: lease "default"/"press" (token `), msg)
		require.Contains(t, msg, "lost: renewal deadline passed")
		require.Contains(t, msg, "another holder may have taken the key", "the error does not say the work may have overlapped")
		require.Contains(t, msg, "writes fenced by token", "the error does not say which writes were safe")
		require.Contains(t, msg, "cannot have overlapped another holder's, unfenced ones may have")
	}
}
