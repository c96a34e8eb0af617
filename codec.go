package sentinel

// This file: Codec and JSONCodec (how results are stored), the error marks fn returns (Retryable, Final), and Client.encode.

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Codec encodes Once results for storage and decodes them on replay.
type Codec interface {
	Encode(v any) ([]byte, error)
	Decode(data []byte, v any) error
}

// JSONCodec is the default Codec: encoding/json.
type JSONCodec struct{}

// Encode marshals v as JSON.
func (JSONCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }

// Decode unmarshals JSON data into v.
func (JSONCodec) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// Retryable marks an error returned by a Once fn as "nothing happened": no
// side effect took place, so the key goes back to claimed (with its lease
// ended) and the next caller may run it. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err: err}
}

// IsRetryable reports whether err was marked with Retryable and a retry
// can still help: it is false when err also says that the key's outcome is
// one no retry changes, matching ErrUncertain (fn's Retryable error in a
// re-run's last attempt, or from an OnceTx fn that closed its transaction),
// ErrReconciling (the key moved to reconciling while fn ran) or ErrFinal,
// even though such an error wraps fn's Retryable error: errors.Is and
// errors.As still reach fn's error. A Retryable fn whose key moved on to
// another state (ErrWrongState) is retryable: a retry gets what the key
// holds now. It agrees with ShouldRetry, which also retries ErrInProgress,
// so it may be asked first, as in the HTTP example of docs/once.md.
func IsRetryable(err error) bool {
	var r *retryableError
	if !errors.As(err, &r) || IsFinal(err) {
		return false
	}
	for _, never := range neverRetried {
		if errors.Is(err, never) {
			return false
		}
	}
	return true
}

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Final marks an error returned by a Once fn as the outcome: fn is done and
// err is its result (a card declined, an invalid account), not a doubt
// about whether something happened. The key completes with err's message
// stored; this call returns a *FinalError wrapping err, and every later
// caller gets a *FinalError with the same message, matching ErrFinal,
// without fn running again. fn may return a value along with it; the value
// is stored and replayed too. Final(nil) is nil. A message PostgreSQL
// cannot store as text is stored with its invalid UTF-8 bytes as U+FFFD and
// NUL as the four characters \x00 (FinalError.Message holds the stored
// text, for this call too); the same goes for every error and panic text
// recorded in the history.
//
// In OnceTx, a Final outcome commits fn's writes with the completion.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalMark{err: err}
}

// errText is fn's error as text for the history and a Final outcome. It
// goes through fmt, which recovers a panic in an Error method (a nil
// *T returned as an error, whose Error reads its receiver): called
// directly, outside fn's recovery, the panic escaped after the claim and
// left the key executing with no outcome recorded.
func errText(err error) string { return fmt.Sprint(err) }

// IsFinal reports whether err was marked with Final.
func IsFinal(err error) bool {
	var f *finalMark
	return errors.As(err, &f)
}

type finalMark struct{ err error }

func (e *finalMark) Error() string { return e.err.Error() }
func (e *finalMark) Unwrap() error { return e.err }

// encode encodes a result with the call's codec, within MaxResultSize. A
// codec that panics (a MarshalJSON with a bug) fails the encoding like any
// other error: fn succeeded, so Once still completes the key (without its
// result) and OnceTx rolls back, where the panic left the key executing
// with no evidence (Once) or the transaction open, holding its locks and
// its connection (OnceTx).
func (c *Client) encode(o callOptions, value any) (data []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("encoding the result panicked: %v", p)
		}
	}()
	data, err = o.codec.Encode(value)
	if err == nil && len(data) > c.cfg.MaxResultSize {
		err = fmt.Errorf("encoded result is %d bytes, over MaxResultSize %d", len(data), c.cfg.MaxResultSize)
	}
	return data, err
}
