package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An HTTP request's key whose re-runs were all spent (Options.Rerun,
// WithRerun) is uncertain: sentinel inspect of its execution key said
// "attempt: 2 of at most 2 (WithRerun)", which tells the operator the
// effect may have happened twice, but idempotency inspect of the same key
// said nothing of its attempts (nor with --json). Both now print the
// same line, from one helper, and idempotency inspect --json gives
// "attempt" and "max_attempts" as inspect --json does.
func TestIdempotencyInspectShowsTheAttempt(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	key := idempotency.ExecutionKey("cus_1", "k-1")
	for i := 0; i < 2; i++ {
		_, err := sentinel.Once(ctxT(t), e.client, key, fail, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	ex, err := e.client.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, 2, ex.Attempt)
	require.False(t, ex.Rerunnable(), "its re-runs are spent: uncertain")

	r := e.run("inspect", key)
	requireCode(t, r, exitOK)
	require.Regexp(t, `\nattempt:\s+2 of at most 2 \(WithRerun\)\n`, r.stdout)
	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.Regexp(t, `\nattempt:\s+2 of at most 2 \(WithRerun\)\n`, r.stdout)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1", "--json")
	requireCode(t, r, exitOK)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec), r.stdout)
	require.Equal(t, float64(2), rec["attempt"], r.stdout)
	require.Equal(t, float64(2), rec["max_attempts"], r.stdout)

	// A key run once, without WithRerun, gets no such line, as inspect.
	e.uncertainKey(e.client, idempotency.ExecutionKey("cus_1", "k-2"))
	r = e.run("idempotency", "inspect", "k-2", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "attempt:")
}
