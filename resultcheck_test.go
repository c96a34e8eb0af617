package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// registerTestResultCheck, called by TestMain: keys starting with
// "checked:" accept only JSON objects with an "ok" member; other keys are
// not this check's business.
func registerTestResultCheck() {
	sentinel.RegisterResultCheck(func(key string, value []byte) error {
		if strings.HasPrefix(key, "checked:") && !strings.Contains(string(value), `"ok"`) {
			return errors.New("a checked: key needs an ok member")
		}
		return nil
	})
}

// Issue 18.3: a registered result check refuses a value before
// ForceComplete or SetResult writes anything.
func TestRegisterResultCheck(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for _, key := range []string{"checked:1", "plain-1"} {
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 0, errors.New("timeout") })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		ex, err := c.Reconcile(ctx, key)
		require.NoError(t, err)
		err = c.ForceComplete(ctx, key, map[string]int{"n": 1}, sentinel.WithToken(ex.Token))
		if key == "plain-1" {
			require.NoError(t, err, "a key the check does not own")
			continue
		}
		var inv *sentinel.InvalidError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, "value", inv.Field)
		require.Contains(t, err.Error(), "needs an ok member")
		now, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		require.Equal(t, sentinel.StateReconciling, now.State, "a refused value was written")
		require.NoError(t, c.ForceComplete(ctx, key, map[string]bool{"ok": true}, sentinel.WithToken(ex.Token)))
	}
}

// A nil check panics at registration, where the mistake is, instead of at
// every later ForceComplete and SetResult; nothing is registered.
func TestRegisterResultCheckRefusesNil(t *testing.T) {
	require.PanicsWithValue(t, "sentinel: RegisterResultCheck with a nil check", func() { sentinel.RegisterResultCheck(nil) })
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "after-nil", func(context.Context) (int, error) { return 0, errors.New("timeout") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Reconcile(ctx, "after-nil")
	require.NoError(t, err)
	require.NoError(t, c.ForceComplete(ctx, "after-nil", 1, sentinel.WithToken(ex.Token)), "a nil check was registered")
}
