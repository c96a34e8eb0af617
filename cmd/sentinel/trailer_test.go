package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A stored response's trailer fields (idempotency.Response.Trailer, sent
// after the body on every replay) were left out of idempotency inspect,
// text and --json, though the client gets them.
func TestIdempotencyInspectShowsTrailers(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "paid")
		w.Header().Set("X-Checksum", "abc")
	})
	srv := httptest.NewServer(idempotency.Middleware(e.client, idempotency.Options{
		Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})(h))
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusCreated, postCharge(t, srv, "acct_1", "k-1", "{}").status)

	r := e.run("idempotency", "inspect", "k-1", "--scope", "acct_1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "trailer X-Checksum: abc")
	r = e.run("idempotency", "inspect", "k-1", "--scope", "acct_1", "--json")
	requireCode(t, r, exitOK)
	var rec struct {
		Response struct {
			Trailer http.Header `json:"trailer"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec), r.stdout)
	require.Equal(t, "abc", rec.Response.Trailer.Get("X-Checksum"), r.stdout)
}
