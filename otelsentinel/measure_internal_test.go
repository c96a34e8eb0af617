package otelsentinel

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// measure's cache stops growing at maxCachedAttrs entries, whatever
// namespaces callers pass; past it each new combination is still
// measured, built at each call.
func TestMeasureCacheIsBounded(t *testing.T) {
	var o observer
	built := 0
	for i := 0; i < 3*maxCachedAttrs; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		opt := o.measure(attrKey{kind: "ns", ns: ns}, func() []attribute.KeyValue {
			built++
			return []attribute.KeyValue{AttrNamespace.String(ns)}
		})
		if opt == nil {
			t.Fatalf("no option for namespace %d", i)
		}
	}
	entries := 0
	o.attrs.Range(func(any, any) bool { entries++; return true })
	if entries != maxCachedAttrs || o.cached.Load() != maxCachedAttrs {
		t.Fatalf("cache holds %d entries (counter %d), want %d", entries, o.cached.Load(), maxCachedAttrs)
	}
	if built != 3*maxCachedAttrs {
		t.Fatalf("built %d attribute sets, want %d", built, 3*maxCachedAttrs)
	}
	// A cached combination is served from the cache, not built again.
	o.measure(attrKey{kind: "ns", ns: "ns-0"}, func() []attribute.KeyValue {
		t.Fatal("ns-0 is cached: build must not run")
		return nil
	})
}
