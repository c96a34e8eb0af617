package sentinel_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn returned a Final outcome with a value that cannot be encoded: the
// call that ran fn gets the *FinalError, and so must every replay (the
// outcome was stored); replays got ErrResult and no ErrFinal.
func TestFinalWithAnUnencodableValueReplaysAsFinal(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	declined := func(context.Context) (float64, error) {
		return math.NaN(), sentinel.Final(errors.New("card declined"))
	}
	_, err := sentinel.Once(ctx, c, "k", declined)
	require.ErrorIs(t, err, sentinel.ErrFinal)
	require.EqualError(t, err, "card declined")
	for _, cl := range []*sentinel.Client{c, e.client(nil)} { // remembered, and not
		res, err := sentinel.Once(ctx, cl, "k", declined)
		require.True(t, res.Cached)
		require.ErrorIs(t, err, sentinel.ErrFinal, "the replay of a Final outcome")
		var fe *sentinel.FinalError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "card declined", fe.Message)
	}
}
