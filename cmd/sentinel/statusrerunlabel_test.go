package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status's counts row for rerun pending keys said "nothing runs it until
// the next caller with WithRerun" for a namespace whose rerun pending
// keys were all HTTP requests', which the client's repeat of the request
// re-runs. The label names both.
func TestStatusRerunPendingLabelHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPending(e.newClient("api"), idempotency.ExecutionKey("cus_1", "k-1"))
	r := e.run("status", "-n", "api")
	requireCode(t, r, exitOK)
	require.Regexp(t, `api\s+executing \(rerun pending: nothing runs it until the next caller with WithRerun, or the client's repeat of an HTTP request\)\s+1\s`, r.stdout)
}
