package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// basket has members whose Go zero value encodes as null: a nil slice, a
// nil map, a nil []byte.
type basket struct {
	ID    string         `json:"id"`
	Items []string       `json:"items"`
	Tags  map[string]int `json:"tags"`
	Sig   []byte         `json:"sig"`
}

// An operator completes an uncertain key with a value of the callers' own
// type, built in Go (ForceComplete, as docs/once.md shows it): the callers
// must get it back, nil slices and maps included, which encoding/json
// writes as null and decodes back to nil. The strict replay of operators'
// values refused them as "does not fit".
func TestOperatorValueWithNilMembersReplays(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "order-1", func(context.Context) (basket, error) {
		return basket{}, errors.New("card network timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	rec, err := c.Reconcile(ctx, "order-1")
	require.NoError(t, err)
	want := basket{ID: "b-1"}
	require.NoError(t, c.ForceComplete(ctx, "order-1", want, sentinel.WithToken(rec.Token)))
	res, err := sentinel.Once(ctx, c, "order-1", func(context.Context) (basket, error) { return basket{}, nil })
	require.NoError(t, err, "the operator's value of the callers' own type")
	require.True(t, res.Cached)
	require.Equal(t, want, res.Value)
}

// The replay stays strict where null does not fit: a string member given
// null, a member the type does not have.
func TestOperatorValueNullWhereTheTypeHasNone(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for key, value := range map[string]string{
		"null-id": `{"id":null,"items":null,"tags":null,"sig":null}`,
		"unknown": `{"id":"b-1","items":null,"tags":null,"sig":null,"extra":1}`,
	} {
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (basket, error) {
			return basket{}, errors.New("card network timed out")
		})
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		rec, err := c.Reconcile(ctx, key)
		require.NoError(t, err)
		require.NoError(t, c.ForceComplete(ctx, key, json.RawMessage(value), sentinel.WithToken(rec.Token)))
		_, err = sentinel.Once(ctx, c, key, func(context.Context) (basket, error) { return basket{}, nil })
		require.ErrorIs(t, err, sentinel.ErrResult, "%s: %s", key, value)
	}
}
