package sentinel

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// relLock's zero value is unlocked; lockCtx gives up when ctx ends while
// the lock is held, and takes a free lock even when ctx has ended.
func TestRelLock(t *testing.T) {
	var m relLock
	require.True(t, m.tryLock())
	require.False(t, m.tryLock())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, m.lockCtx(ctx), "took a held lock")
	m.Unlock()
	require.True(t, m.lockCtx(ctx), "did not take a free lock")
	got := make(chan struct{})
	go func() {
		m.Lock()
		close(got)
		m.Unlock()
	}()
	m.Unlock()
	<-got
	require.Panics(t, func() { (&relLock{}).Unlock() })
}
