package main

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// hungServer listens and accepts connections but never answers: a
// PostgreSQL that hangs, or a path that carries the handshake and
// nothing else. It counts the connections made to it.
func hungServer(t *testing.T) (addr string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns = new(atomic.Int64)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String(), conns
}

// status with the database unreachable read the other schemas first (a
// connection attempt of its own, with its own timeout, its failure only
// a note) and then the schema shown (another attempt): twice the wait,
// and without connect_timeout in the connection string each attempt
// waited pgxpool's two minutes. It now makes one attempt, bounded by
// sentinel's own connect timeout when the string sets none, and says
// what to do.
func TestStatusUnreachableFailsOnceAndSaysWhatToDo(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"status", "--exit-code"}, {"status", "--json"}} {
		addr, conns := hungServer(t)
		r := runBin(t, []string{fmt.Sprintf("DATABASE_URL=postgres://postgres@%s/postgres?connect_timeout=1", addr)}, nil, args...)
		requireCode(t, r, exitError)
		require.Equal(t, int64(1), conns.Load(), "%v: connection attempts: %s", args, r.stderr)
		require.Contains(t, r.stderr, "cannot reach the database", "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "connect_timeout", "%v: %s", args, r.stderr)
	}

	// No connect_timeout: sentinel's own bound, named in the message.
	addr, conns := hungServer(t)
	r := runBin(t, []string{fmt.Sprintf("DATABASE_URL=postgres://postgres@%s/postgres", addr)}, nil, "status")
	requireCode(t, r, exitError)
	require.Equal(t, int64(1), conns.Load(), r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf("no answer within %s", defaultConnectTimeout), r.stderr)
}
