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

// The operator who looks a charge up at the provider needs the reference
// fn passed it (sentinel.EffectKey); the tools did not print it, and the
// runbook had the operator compute it with a shell pipeline. inspect,
// idempotency inspect and idempotency list now print the value fn got.
func TestInspectPrintsTheEffectKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	var got []string
	fail := func(ctx context.Context) (int, error) {
		got = append(got, sentinel.EffectKey(ctx))
		return 0, errors.New("provider timed out")
	}
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	httpKey := idempotency.ExecutionKey("cus_1", "k-1")
	_, err = sentinel.Once(ctxT(t), e.client, httpKey, fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Len(t, got, 2)
	require.NotEqual(t, got[0], got[1])

	r := e.run("inspect", "pay-1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "effect key:")
	require.Contains(t, r.stdout, got[0])
	r = e.run("inspect", "pay-1", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.Equal(t, got[0], ex.EffectKey)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, got[1])
	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1", "--json")
	requireCode(t, r, exitOK)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	require.Equal(t, got[1], rec["effect_key"], r.stdout)
	r = e.run("idempotency", "list", "--json")
	requireCode(t, r, exitOK)
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Keys, 1, r.stdout)
	require.Equal(t, got[1], list.Keys[0]["effect_key"], r.stdout)
}
