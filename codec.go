package sentinel

import (
	"encoding/json"
	"errors"
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

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }
