package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every line back until the client closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return 0, err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return time.Since(start), err
	}
	if got != msg+"\n" {
		return 0, errors.New("echo mismatch: " + got)
	}
	return time.Since(start), nil
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestForwardsAndAddsLatency(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if d, err := roundTrip(c, r, "hello", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("healthy round trip: %v after %s", err, d)
	}
	p.SetLatency(150 * time.Millisecond)
	d, err := roundTrip(c, r, "slow", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Two hops (there and back), each delayed.
	if d < 300*time.Millisecond {
		t.Fatalf("round trip took %s, want >= 300ms with 150ms latency each way", d)
	}
	p.SetLatency(0)
	if d, err := roundTrip(c, r, "fast again", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("after latency removed: %v after %s", err, d)
	}
	if p.Stats().Delayed < 2 {
		t.Fatalf("stats: %+v", p.Stats())
	}
}

func TestResetAll(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after reset: %v, want a connection error", err)
	}
	// New connections still work.
	c2, r2 := dial(t, p)
	if _, err := roundTrip(c2, r2, "b", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestBlackholeThenHeal(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before", time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	if _, err := roundTrip(c, r, "lost", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed round trip: %v, want a timeout", err)
	}
	// A connection opened during the blackhole is silent too.
	c2, r2 := dial(t, p)
	if _, err := roundTrip(c2, r2, "lost too", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection during blackhole: %v, want a timeout", err)
	}
	p.Heal()
	// Connections that lost bytes are reset: their streams have gaps.
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("damaged connection after heal: %v, want a connection error", err)
	}
	c3, r3 := dial(t, p)
	if _, err := roundTrip(c3, r3, "after", time.Second); err != nil {
		t.Fatalf("new connection after heal: %v", err)
	}
	if s := p.Stats(); s.Dropped < 2 || s.Reset < 2 {
		t.Fatalf("stats: %+v", s)
	}
}
