package console

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultAddr is where Serve listens when given no address: loopback only.
const DefaultAddr = "127.0.0.1:8380"

// Serve runs h (a Console, or a mux around one) on addr until ctx ends,
// then shuts down gracefully (live event streams end at once: their
// requests' contexts derive from ctx). An empty addr means DefaultAddr,
// loopback only: expose the console beyond the machine deliberately, behind
// your own authentication (a reverse proxy, an SSH tunnel). ready, if not
// nil, is called with the bound address once the server listens.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// IsLoopback reports whether addr (host:port) binds to loopback addresses
// only. A command can use it to warn, or to require an explicit flag, before
// serving the console to the network.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
