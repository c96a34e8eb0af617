package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// list --uncertain and list --rerun-pending print an HTTP request's key as
// the execution key the middleware derives (idempotency:N:scope:key), with
// nothing leading to the idempotency commands, which address it by scope
// and client's key and resolve it with a response. After the table, on
// stderr as list's other hints, each such key now gets its idempotency
// inspect command, runnable as printed; a listing without one gets no
// hint, and --json is unchanged (its executions carry "idempotency_key").
func TestListNamesIdempotencyCommandForHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	pay := e.newClient("payments")
	e.uncertainKey(pay, idempotency.ExecutionKey("cus 1", "k-unc"))
	e.uncertainKey(pay, "order-unc")
	_, err := sentinel.Once(ctxT(t), pay, idempotency.ExecutionKey("cus 1", "k-rerun"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), pay, "order-rerun", fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	for flag, key := range map[string]string{"--uncertain": "k-unc", "--rerun-pending": "k-rerun"} {
		r := e.run("list", flag)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, idempotency.ExecutionKey("cus 1", key), r.stdout)
		line := findCommand(t, r.stderr, "sentinel idempotency inspect")
		require.Equal(t, "sentinel idempotency inspect "+key+" --scope 'cus 1' -n payments --schema "+e.schema, line, flag)
		require.Contains(t, r.stderr, "HTTP request", flag)
		p := runPrinted(t, line, "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, key, p.stdout)

		// No HTTP key in the listing: no hint.
		r = e.run("list", flag, "order-")
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, "order-", r.stdout)
		require.NotContains(t, r.stderr, "idempotency", r.stderr)

		// --json: the listing only, each HTTP key with its idempotency_key.
		r = e.run("list", flag, "--json")
		requireCode(t, r, exitOK)
		require.NotContains(t, r.stderr, "idempotency inspect", r.stderr)
		var out struct {
			Executions []execJSON `json:"executions"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
		require.Len(t, out.Executions, 2)
	}

	// More than ten: ten commands, then the idempotency listing.
	shop := e.newClient("shop")
	for i := 0; i < 11; i++ {
		e.uncertainKey(shop, idempotency.ExecutionKey("acct", fmt.Sprintf("r-%02d", i)))
	}
	r := e.run("list", "--uncertain", "-n", "shop")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "11 of the keys listed are HTTP requests' Idempotency-Keys")
	require.Len(t, regexp.MustCompile(`(?m)^  sentinel idempotency inspect `).FindAllString(r.stderr, -1), 10, r.stderr)
	line := findCommand(t, r.stderr, "sentinel idempotency list")
	require.Equal(t, "sentinel idempotency list --uncertain -n shop --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "r-10", p.stdout)
}
