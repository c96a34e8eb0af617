package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn's result, recorded when its completion was refused, reaches the
// operator exactly: inspect shows it, and the force-complete command
// reconcile prints carries it, a large integer included. Run as printed,
// it stores fn's own value, so the caller gets that value, not the
// nearest float64 (1234567890123456789 read back as 1234567890123456800).
func TestRefusedResultReachesTheCallerExactly(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	type charge struct {
		ID     int64   `json:"id"`
		Amount float64 `json:"amount"`
	}
	want := charge{ID: 1234567890123456789, Amount: 12.5}
	_, err := sentinel.Once(ctxT(t), e.client, "late", func(ctx context.Context) (charge, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+300ms
		<-ctx.Done()          // the hard TTL ends the lease while fn works
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return want, nil
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("inspect", "late")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `fn's result: {"amount":12.5,"id":1234567890123456789}`)
	r = e.run("inspect", "late", "--json")
	requireCode(t, r, exitOK)
	var ex struct {
		CompletionRefused struct {
			Metadata struct {
				Result json.RawMessage `json:"result"`
			} `json:"metadata"`
		} `json:"completion_refused"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.JSONEq(t, `{"amount":12.5,"id":1234567890123456789}`, string(ex.CompletionRefused.Metadata.Result))
	require.Contains(t, string(ex.CompletionRefused.Metadata.Result), "1234567890123456789")

	r = e.run("reconcile", "late", "--yes")
	requireCode(t, r, exitOK)
	complete := findCommand(t, r.stdout, "sentinel force-complete")
	require.Contains(t, complete, "1234567890123456789")
	requireCode(t, runPrinted(t, complete, "y\n"), exitOK)
	got, err := sentinel.Once(ctxT(t), e.client, "late", func(context.Context) (charge, error) {
		return charge{}, errors.New("must not run")
	})
	require.NoError(t, err)
	require.Equal(t, want, got.Value)

	// Numbers float64 holds are float64 in Metadata, as before.
	evs, err := e.client.History(ctxT(t), "late")
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Type == "completion_refused" {
			res := ev.Metadata["result"].(map[string]any)
			require.Equal(t, 12.5, res["amount"])
			require.Equal(t, json.Number("1234567890123456789"), res["id"])
		}
	}
}
