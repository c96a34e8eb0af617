package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// chargeHandler is the HTTP recipe of docs/once.md: a client that goes away
// before the side effect leaves the key retryable, not uncertain.
func chargeHandler(client *sentinel.Client, prepare func(context.Context) error, charge func(context.Context) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := sentinel.Once(r.Context(), client, "charge-"+r.PathValue("order"),
			func(ctx context.Context) (string, error) {
				// Everything before the side effect: if the request ended
				// (client gone, deadline), nothing has happened yet.
				if err := prepare(ctx); err != nil {
					return "", sentinel.Retryable(err)
				}
				if err := ctx.Err(); err != nil {
					return "", sentinel.Retryable(err)
				}
				// The side effect. From here on an error means "don't know".
				return charge(ctx)
			})
		switch {
		case sentinel.IsRetryable(err), errors.Is(err, sentinel.ErrInProgress):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "try again", http.StatusServiceUnavailable)
		case errors.Is(err, sentinel.ErrUncertain), errors.Is(err, sentinel.ErrReconciling):
			http.Error(w, "payment under review", http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			fmt.Fprintf(w, "%s cached=%v", res.Value, res.Cached)
		}
	}
}

// Issue 9, item 7: the request context ends before the side effect: the
// key is retryable and the next request charges exactly once.
func TestHTTPRecipeClientGoneBeforeSideEffect(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var charges atomic.Int32
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	prepare := func(ctx context.Context) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	charge := func(context.Context) (string, error) { charges.Add(1); return "ch_1", nil }
	mux := http.NewServeMux()
	mux.Handle("POST /charge/{order}", chargeHandler(c, prepare, charge))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The client gives up while the handler is still preparing.
	rctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, srv.URL+"/charge/42", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Eventually(t, func() bool {
		ex, err := c.Inspect(ctx, "charge-42")
		return err == nil && ex.State == sentinel.StateClaimed && !ex.LeaseAlive
	}, 5*time.Second, 10*time.Millisecond, "the key went back to claimed, not uncertain")

	close(gate)
	for i, want := range []string{"ch_1 cached=false", "ch_1 cached=true"} {
		resp, err := http.Post(srv.URL+"/charge/42", "", nil)
		require.NoError(t, err)
		body := make([]byte, 64)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body[:n])
		require.Equal(t, want, string(body[:n]))
	}
	require.EqualValues(t, 1, charges.Load())
}
