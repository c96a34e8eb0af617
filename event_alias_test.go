package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Event.Event, the field's name before 0.2, still carries the event's
// type in History and Follow (deprecated alias of Type).
func TestEventDeprecatedAlias(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	col, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})
	_, err := sentinel.Once(ctx, c, "a", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	h, err := c.History(ctx, "a")
	require.NoError(t, err)
	require.NotEmpty(t, h)
	for _, ev := range h {
		require.NotEmpty(t, ev.Type)
		require.Equal(t, ev.Type, ev.Event) //nolint:staticcheck // the deprecated alias is what is tested
	}
	col.waitFor(t, "a's events", func(evs []sentinel.Event) bool { return len(evs) == len(h) })
	for _, ev := range col.events() {
		require.Equal(t, ev.Type, ev.Event) //nolint:staticcheck // the deprecated alias is what is tested
	}
}
