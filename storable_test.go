package sentinel_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// unstorable is text PostgreSQL refuses as text (invalid UTF-8, 22021)
// and as jsonb (NUL, 22P05), and what Sentinel stores in its place.
const (
	unstorable = "card \xff declined\x00 by issuer"
	storedAs   = "card \uFFFD declined\\x00 by issuer"
)

// historyOf returns key's events of type typ.
func historyOf(t *testing.T, c *sentinel.Client, key, typ string) []sentinel.Event {
	t.Helper()
	hist, err := c.History(ctxT(t), key)
	require.NoError(t, err)
	var out []sentinel.Event
	for _, ev := range hist {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// Issue 26.3: text PostgreSQL cannot store, in an outcome, never strands
// the key: each write path stores it with invalid bytes as U+FFFD and NUL
// as the text \x00, and the outcome is the one fn gave.
func TestUnstorableTextKeepsTheOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)

	t.Run("Final", func(t *testing.T) {
		cause := errors.New(unstorable)
		_, err := sentinel.Once(ctx, c, "final", func(context.Context) (int, error) { return 7, sentinel.Final(cause) })
		require.ErrorIs(t, err, sentinel.ErrFinal, "%v", err)
		require.ErrorIs(t, err, cause)
		ex, err := c.Inspect(ctx, "final")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateCompleted, ex.State)
		require.Equal(t, storedAs, ex.FinalError)
		res, err := sentinel.Once(ctx, c, "final", func(context.Context) (int, error) { t.Fatal("ran again"); return 0, nil })
		var fe *sentinel.FinalError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, storedAs, fe.Message)
		require.True(t, res.Cached)
		require.Equal(t, 7, res.Value)
	})

	t.Run("Retryable", func(t *testing.T) {
		cause := errors.New(unstorable)
		_, err := sentinel.Once(ctx, c, "retry", func(context.Context) (int, error) { return 0, sentinel.Retryable(cause) })
		require.ErrorIs(t, err, cause)
		require.NotErrorIs(t, err, sentinel.ErrUncertain)
		ev := historyOf(t, c, "retry", "retryable")
		require.Len(t, ev, 1)
		require.Equal(t, storedAs, ev[0].Metadata["error"])
		res, err := sentinel.Once(ctx, c, "retry", func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err, "the key was given back: the next caller runs fn")
		require.Equal(t, 1, res.Value)
	})

	t.Run("failed", func(t *testing.T) {
		_, err := sentinel.Once(ctx, c, "failed", func(context.Context) (int, error) { return 0, errors.New(unstorable) })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		ev := historyOf(t, c, "failed", "failed")
		require.Len(t, ev, 1, "the failure is recorded")
		require.Equal(t, storedAs, ev[0].Metadata["error"])
	})

	t.Run("panic", func(t *testing.T) {
		func() {
			defer func() { require.Equal(t, unstorable, recover()) }()
			_, _ = sentinel.Once(ctx, c, "panic", func(context.Context) (int, error) { panic(unstorable) })
		}()
		ev := historyOf(t, c, "panic", "failed")
		require.Len(t, ev, 1)
		require.Equal(t, "panic: "+storedAs, ev[0].Metadata["error"])
	})

	t.Run("result not encodable", func(t *testing.T) {
		_, err := sentinel.Once(ctx, c, "codec", func(context.Context) (int, error) { return 1, nil },
			sentinel.WithCodec(failingCodec{}))
		require.ErrorIs(t, err, sentinel.ErrResult)
		require.NotErrorIs(t, err, sentinel.ErrUncertain)
		ex, err := c.Inspect(ctx, "codec")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateCompleted, ex.State)
		require.Equal(t, storedAs, ex.ResultError)
	})

	t.Run("metadata and reasons", func(t *testing.T) {
		meta := map[string]any{"reason": unstorable, unstorable: 1, "raw": json.RawMessage(`["\udc00","\u0000"]`)}
		_, err := sentinel.Once(ctx, c, "meta", func(context.Context) (int, error) { return 0, errors.New("boom") },
			sentinel.WithMetadata(meta))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		claimed := historyOf(t, c, "meta", "claimed")
		require.Len(t, claimed, 1)
		require.Equal(t, storedAs, claimed[0].Metadata["reason"])
		require.Contains(t, claimed[0].Metadata, storedAs)
		require.Equal(t, []any{"\uFFFD", `\x00`}, claimed[0].Metadata["raw"])
		_, err = c.Reconcile(ctx, "meta", sentinel.WithMetadata(meta))
		require.NoError(t, err)
		require.NoError(t, c.ResetToClaimed(ctx, "meta", sentinel.WithMetadata(meta)))
		require.Equal(t, storedAs, historyOf(t, c, "meta", "reconciling")[0].Metadata["reason"])
	})

	t.Run("OnceTx Final", func(t *testing.T) {
		cause := errors.New(unstorable)
		_, err := sentinel.OnceTx(ctx, c, "tx-final", func(context.Context, pgx.Tx) (int, error) { return 3, sentinel.Final(cause) })
		require.ErrorIs(t, err, sentinel.ErrFinal, "%v", err)
		ex, err := c.Inspect(ctx, "tx-final")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateCompleted, ex.State)
		require.Equal(t, storedAs, ex.FinalError)
	})

	t.Run("OnceTx rolled back", func(t *testing.T) {
		cause := errors.New(unstorable)
		_, err := sentinel.OnceTx(ctx, c, "tx-fail", func(context.Context, pgx.Tx) (int, error) { return 0, cause })
		require.ErrorIs(t, err, cause)
		ev := historyOf(t, c, "tx-fail", "rolled_back")
		require.Len(t, ev, 1)
		require.Equal(t, storedAs, ev[0].Metadata["error"])
		_, err = sentinel.OnceTx(ctx, c, "tx-fail", func(context.Context, pgx.Tx) (int, error) { return 1, nil })
		require.NoError(t, err)
	})

	t.Run("completion refused", func(t *testing.T) {
		// fn succeeded with a result whose JSON holds \u0000 (jsonb
		// refuses it), its completion was refused: the evidence is
		// recorded, byte for byte.
		_, err := sentinel.Once(ctx, c, "refused", func(ctx context.Context) (string, error) {
			started := time.Now() // after the claim: its hard TTL ends before started+300ms
			<-ctx.Done()
			// Return once the hard TTL has certainly passed on the
			// database clock too (a loaded machine commits the claim late).
			time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
			return unstorable, sentinel.Final(errors.New(unstorable))
		}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		ev := historyOf(t, c, "refused", "completion_refused")
		require.Len(t, ev, 1, "the refused completion is recorded")
		raw, err := base64.StdEncoding.DecodeString(ev[0].Metadata["result_base64"].(string))
		require.NoError(t, err)
		want, err := json.Marshal(unstorable) // what the codec stored for fn's result
		require.NoError(t, err)
		require.Equal(t, string(want), string(raw), "fn's encoded result, exactly")
		require.Contains(t, string(raw), `\u0000`)
		require.Equal(t, storedAs, ev[0].Metadata["final_error"])
	})
}

// failingCodec cannot encode, with an error PostgreSQL cannot store.
type failingCodec struct{}

func (failingCodec) Encode(any) ([]byte, error)      { return nil, errors.New(unstorable) }
func (failingCodec) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// Text given by the caller that PostgreSQL cannot store is bad input:
// ErrInvalid, nothing written.
func TestUnstorableInputIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := c.Turn(ctx, "printer", sentinel.WithLabel("nightly\x00"))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Elector("group", sentinel.ElectorOptions{AppVersion: "1.0\xff"})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Elector("group", sentinel.ElectorOptions{AppVersion: "1.0\x00"})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = sentinel.New(e.pool(nil), &sentinel.Config{Schema: e.schema, Host: "web\x00-1"})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	require.Zero(t, e.count("queue_events", ""))
	require.Zero(t, e.count("members", ""))
	require.False(t, strings.Contains(storedAs, "\x00"))
}
