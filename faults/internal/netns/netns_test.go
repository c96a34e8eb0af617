package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func newPath(t *testing.T) *Path {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skip(why)
	}
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		for _, ns := range []string{p.cli, p.srv} {
			if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	})
	return p
}

// echo serves l: every connection gets its bytes back.
func echo(t *testing.T, l net.Listener) {
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
}

func roundTrip(c net.Conn, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	_, err := io.ReadFull(c, b)
	return err
}

// userTimeout sets TCP_USER_TIMEOUT on c.
func userTimeout(t *testing.T, c net.Conn, d time.Duration) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 0x12 /* TCP_USER_TIMEOUT */, int(d.Milliseconds()))
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
}

// echoPath makes a path with an echo server across it and returns a
// dialer of connections to it.
func echoPath(t *testing.T) (*Path, func() net.Conn) {
	p := newPath(t)
	l, err := p.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, l)
	return p, func() net.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := p.Dial(ctx, "tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// A cut path is silence: a round trip times out, nothing is closed, and
// after Heal the same connection works again. With TCP_USER_TIMEOUT the
// kernel gives up on its own: the drop is real, not a proxy's.
func TestCutIsSilenceAndHealResumes(t *testing.T) {
	p, dial := echoPath(t)
	c := dial()
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if err := roundTrip(c, 500*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("round trip over a cut path: %v, want a timeout", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	// The ping written while cut is retransmitted and echoed now.
	b := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("after Heal: %v", err)
	}

	// The kernel's own timeout on a cut path.
	c2 := dial()
	userTimeout(t, c2, time.Second)
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c2.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = c2.Write([]byte("ping"))
	_, err := c2.Read(b)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("TCP_USER_TIMEOUT on a cut path: %v after %s, want ETIMEDOUT", err, time.Since(start))
	}
	_ = p.Heal()
}

// CutConn cuts one connection; another on the same path keeps working.
func TestCutConnCutsOneConnection(t *testing.T) {
	p, dial := echoPath(t)
	a, b := dial(), dial()
	if err := p.CutConn(a.LocalAddr().(*net.TCPAddr).Port); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(a, 500*time.Millisecond); err == nil {
		t.Fatal("the cut connection still works")
	}
	if err := roundTrip(b, 5*time.Second); err != nil {
		t.Fatalf("the other connection: %v", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	b4 := make([]byte, 4)
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a, b4); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}
