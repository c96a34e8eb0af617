package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// OnElected's ctx, ended by a lost term, gives the loss as its cause, said
// once: not "leadership of ... ending: sentinel: leadership of group ...
// lost: ...", the group and term named twice.
func TestElectorLostTermCauseSaidOnce(t *testing.T) {
	e := newEnv(t)
	causes := make(chan error, 4)
	el, err := e.client(&sentinel.Config{DefaultTTL: time.Second}).Elector("lostcause", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
		},
	})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	term := el.Term()
	// The term's row expires under it: its next renewal finds it lost.
	_, err = admin.Exec(ctxT(t), "UPDATE "+e.table("leaders")+" SET expires_at = clock_timestamp() WHERE election = 'lostcause'")
	require.NoError(t, err)
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(10 * time.Second):
		t.Fatal("OnElected's ctx did not end after its term was lost")
	}
	require.ErrorIs(t, cause, sentinel.ErrLeaseLost)
	var lost *sentinel.LostError
	require.ErrorAs(t, cause, &lost)
	require.Equal(t, term, lost.Token)
	msg := cause.Error()
	require.Equal(t, 1, strings.Count(msg, `"lostcause"`), "the group named once: %s", msg)
	require.Equal(t, 1, strings.Count(msg, "sentinel: "), "one message, not one wrapped in another: %s", msg)
	require.True(t, strings.HasPrefix(msg, "sentinel: leadership of group "), msg)
	require.False(t, errors.Is(cause, context.Canceled), "a loss, not a cancellation: %s", msg)
}
