package containers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/ctxcalls"
	"github.com/sentinel-coordination/sentinel/sentineltest/containers"
)

// nilCtxCalls is every exported call of the package that takes a ctx,
// called with ctx (nil), by its name.
func nilCtxCalls(ctx context.Context) map[string]func() error {
	return map[string]func() error{
		"Start": func() error {
			_, stop, err := containers.Start(ctx, nil)
			if stop != nil {
				stop()
			}
			return err
		},
	}
}

// Start refuses a nil ctx with an error matching sentinel.ErrInvalid that
// names it, before it asks for a Docker engine, as the sentinel package's
// calls do; TestNilContextTableIsComplete keeps the table whole.
func TestNilContextRefusedByEveryCall(t *testing.T) {
	var nilCtx context.Context // a nil ctx is the point
	for name, call := range nilCtxCalls(nilCtx) {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			return call()
		}()
		if !errors.Is(err, sentinel.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "containers."+name) {
			t.Errorf("%s: got %v, want an error matching ErrInvalid that names the call", name, err)
		}
	}
}

// The table of TestNilContextRefusedByEveryCall names every exported call
// of the package that takes a context.Context, read from its source.
func TestNilContextTableIsComplete(t *testing.T) {
	calls, err := ctxcalls.Exported(".")
	if err != nil {
		t.Fatal(err)
	}
	var tabled []string
	var nilCtx context.Context
	for name := range nilCtxCalls(nilCtx) {
		tabled = append(tabled, name)
	}
	slices.Sort(tabled)
	if !slices.Equal(calls, tabled) {
		t.Fatalf("exported calls taking a ctx %v, the nil-ctx table %v", calls, tabled)
	}
}
