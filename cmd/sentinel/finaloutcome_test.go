package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A key completed with Final(err): every caller gets the error (ErrFinal),
// but inspect said only "completed" and showed the stored value, and
// --json (inspect, list) had no field for the error: a declined charge
// read as a completed one. inspect now shows the outcome and --json
// carries "final_error".
func TestInspectShowsAFinalOutcome(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "charge-7", func(context.Context) (receipt, error) {
		return receipt{Amount: 4200}, sentinel.Final(errors.New("card declined"))
	})
	require.ErrorIs(t, err, sentinel.ErrFinal)

	r := e.run("inspect", "charge-7")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "card declined", r.stdout)
	require.Contains(t, r.stdout, "ErrFinal", r.stdout)

	r = e.run("inspect", "charge-7", "--json")
	requireCode(t, r, exitOK)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	require.Equal(t, "card declined", raw["final_error"], r.stdout)

	r = e.run("list", "--state", "completed", "--json")
	requireCode(t, r, exitOK)
	var page struct {
		Executions []map[string]any `json:"executions"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Executions, 1, r.stdout)
	require.Equal(t, "card declined", page.Executions[0]["final_error"], r.stdout)
}
