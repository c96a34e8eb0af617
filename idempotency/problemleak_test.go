package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The 503 a client got when the idempotency store could not be reached
// carried the store's error in its detail: the database's user, name,
// host and port ("failed to connect to `user=payments_app
// database=paymentsdb`: 127.0.0.1:1 ..."), the Sentinel namespace and the
// internal execution key, sent to whoever called the API. The detail now
// says what happened and what to do; the error goes to the client's
// Config.Logger, for the operators.
func TestUnavailableProblemKeepsTheStoreErrorToTheServer(t *testing.T) {
	pool, err := pgxpool.New(ctxT(t), "postgres://payments_app:s3cret@127.0.0.1:1/paymentsdb?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var logged lockedBuffer
	c, err := sentinel.New(pool, &sentinel.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := serve(t, c, idempotency.Options{Scope: accountOf}, func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran without the store")
	})
	r := do(t, srv, "POST", "/charges", "k-1", "x", "X-Account", "cus_42")
	wantProblem(t, r, http.StatusServiceUnavailable, idempotency.ProblemUnavailable)
	if r.header.Get("Retry-After") == "" || !strings.Contains(r.problem.Detail, "retry with the same Idempotency-Key") {
		t.Fatalf("the problem does not say to retry: %v %s", r.header, r.problem.Detail)
	}
	for _, secret := range []string{"payments_app", "paymentsdb", "127.0.0.1", idempotency.KeyPrefix} {
		if strings.Contains(r.body, secret) {
			t.Errorf("the client's problem carries %q: %s", secret, r.body)
		}
	}
	if log := logged.String(); !strings.Contains(log, "payments_app") || !strings.Contains(log, "k-1") || !strings.Contains(log, "cus_42") {
		t.Errorf("the operators' log does not carry the store's error, key and scope: %q", log)
	}
}

// A key completed without its stored response (Sentinel's ErrResultLost)
// got 500 ProblemNotStored whose detail was Sentinel's error for the
// operator: the namespace and internal execution key, and "an operator
// can store it with SetResult", with nothing the client could act on.
// The detail now says the request was processed, will not run again, and
// must not be repeated with another key, and names the command that
// inspects it, as the uncertain problem does.
func TestNotStoredProblemSaysWhatToDo(t *testing.T) {
	c := sentineltest.New(t)
	ctx := ctxT(t)
	// A result the codec cannot encode: the key completes without it.
	_, err := sentinel.Once(ctx, c, idempotency.ExecutionKey("cus_42", "k-2"), func(ctx context.Context) (func(), error) { return func() {}, nil })
	if !errors.Is(err, sentinel.ErrResultLost) {
		t.Fatalf("setup: %v, want ErrResultLost", err)
	}
	srv := serve(t, c, idempotency.Options{Scope: accountOf}, func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran for a completed key")
	})
	r := do(t, srv, "POST", "/charges", "k-2", "x", "X-Account", "cus_42")
	wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemNotStored)
	for _, want := range []string{"will not run again", "do not repeat it with another key", "sentinel idempotency inspect k-2 --scope cus_42"} {
		if !strings.Contains(r.problem.Detail, want) {
			t.Errorf("the detail does not say %q: %s", want, r.problem.Detail)
		}
	}
	if strings.Contains(r.body, idempotency.KeyPrefix) || strings.Contains(r.body, "SetResult") {
		t.Errorf("the detail carries the operator's error: %s", r.problem.Detail)
	}
}
