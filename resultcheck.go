package sentinel

import "sync"

// RegisterResultCheck registers check to vet every value an operator
// stores with ForceComplete or SetResult: it gets the key and the encoded
// value before anything is written, and an error refuses the call (the
// error is an *InvalidError for field "value", matching ErrInvalid, whose
// Reason is check's message). A package that owns a family of keys
// registers a check from its init so that no operator stores a value its
// readers cannot use: package idempotency refuses, for its keys, any value
// that is not an HTTP response the middleware can replay. A check must
// answer nil for keys it does not own. Checks run in registration order.
func RegisterResultCheck(check func(key string, value []byte) error) {
	resultChecks.Lock()
	defer resultChecks.Unlock()
	resultChecks.fns = append(resultChecks.fns, check)
}

var resultChecks struct {
	sync.Mutex
	fns []func(key string, value []byte) error
}

// checkResult runs the registered result checks.
func checkResult(key string, value []byte) error {
	resultChecks.Lock()
	fns := resultChecks.fns
	resultChecks.Unlock()
	for _, fn := range fns {
		if err := fn(key, value); err != nil {
			return invalid("value", "%s", err.Error())
		}
	}
	return nil
}
