package sentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A Final outcome whose value could not be stored (fn returned an
// unencodable value with Final(err)) is not a result lost: every caller
// gets its FinalError, and ResultLost is false. SetResult stored a value
// for it all the same, and every later caller then got that value beside
// the FinalError. It is refused now (ErrWrongState, saying why), and
// nothing is written.
func TestSetResultRefusesAFinalOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "declined", func(context.Context) (chan int, error) {
		return make(chan int), sentinel.Final(errors.New("card declined"))
	})
	require.ErrorIs(t, err, sentinel.ErrFinal)
	ex, err := c.Inspect(ctx, "declined")
	require.NoError(t, err)
	require.NotEmpty(t, ex.FinalError)
	require.False(t, ex.ResultLost())

	err = c.SetResult(ctx, "declined", map[string]int{"a": 1})
	require.ErrorIs(t, err, sentinel.ErrWrongState)
	require.Contains(t, err.Error(), "Final outcome")
	after, err := c.Inspect(ctx, "declined")
	require.NoError(t, err)
	require.False(t, after.ResultByOperator, "nothing was written")
	res, err := sentinel.Once(ctx, c, "declined", func(context.Context) (map[string]int, error) { return nil, nil })
	require.ErrorIs(t, err, sentinel.ErrFinal)
	require.Nil(t, res.Value, "a caller gets the Final outcome, no value an operator set")
}
