// Package netfault is a small TCP proxy that injects network faults between
// database clients and a server: added latency, connection resets and a
// blackhole. It is test machinery for the fault-injection suite; it speaks
// no protocol and forwards bytes in order.
//
// One Proxy serves one client (or one group of clients), so a fault can be
// aimed at a single client while the others keep a healthy path.
package netfault

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection accepted on Addr to a target address.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	latency   time.Duration
	blackhole bool
	links     map[*link]struct{}
	closed    bool
	stats     Stats
	wg        sync.WaitGroup
}

// Stats counts what a Proxy did.
type Stats struct {
	Accepted   int // connections accepted
	Reset      int // connections reset by ResetAll or Heal
	Dropped    int // chunks discarded while blackholed
	Delayed    int // chunks held back by a non-zero latency
	Blackholes int // calls to Blackhole
}

// link is one proxied connection: the client side and the server side.
type link struct {
	client, server net.Conn
	once           sync.Once
	damaged        bool // lost data to the blackhole; guarded by Proxy.mu
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding to target
// ("host:port").
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return Serve(ln, target), nil
}

// Serve starts a proxy on a listener the caller made (in another network
// namespace, say), forwarding to target. The proxy owns ln from now on.
func Serve(ln net.Listener, target string) *Proxy {
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p
}

// Link is one proxied connection: Client is the client's address as the
// proxy sees it, Upstream the proxy's own address on its connection to
// the target (what the server sees as its client).
type Link struct {
	Client, Upstream net.Addr
}

// Links returns the open connections.
func (p *Proxy) Links() []Link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Link, 0, len(p.links))
	for l := range p.links {
		out = append(out, Link{Client: l.client.RemoteAddr(), Upstream: l.server.LocalAddr()})
	}
	return out
}

// Addr returns the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetLatency delays every chunk read from now on, in both directions, by d
// before it is forwarded. Order is preserved: a chunk never overtakes an
// earlier one, so lowering the latency takes effect once the chunks already
// held back have been delivered.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Blackhole makes the proxy discard every byte from now on, in both
// directions, on existing and new connections, without closing anything:
// peers see silence, as behind a partition that drops packets.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.blackhole = true
	p.stats.Blackholes++
	p.mu.Unlock()
}

// Heal ends a blackhole and sets the latency back to zero. Connections that
// lost data to the blackhole are reset (their byte streams have gaps, as a
// real connection would after retransmissions gave up); the others resume.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.blackhole = false
	p.latency = 0
	var damaged []*link
	for l := range p.links {
		if l.damaged {
			damaged = append(damaged, l)
		}
	}
	p.mu.Unlock()
	for _, l := range damaged {
		p.reset(l)
	}
}

// ResetAll resets every open connection (TCP RST to both peers) and
// returns how many it reset. New connections are accepted as usual.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		p.reset(l)
	}
	return len(ls)
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.stats.Accepted++
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, client, server) }()
	go func() { defer wg.Done(); p.pipe(l, server, client) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through a queue that applies the latency in force
// when each chunk was read, and drops chunks while blackholed.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() { // writer
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				p.close(l)
				for range q { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole, lat := p.blackhole, p.latency
			if hole {
				l.damaged = true
				p.stats.Dropped++
			} else if lat > 0 {
				p.stats.Delayed++
			}
			p.mu.Unlock()
			if !hole {
				q <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(lat)}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.close(l)
			}
			break
		}
	}
	close(q)
	<-done
	// Half-close: pass the EOF on once everything before it was written.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// reset closes both sides of l with SO_LINGER 0, so peers get a TCP RST.
func (p *Proxy) reset(l *link) {
	p.mu.Lock()
	p.stats.Reset++
	p.mu.Unlock()
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	p.close(l)
}

func (p *Proxy) close(l *link) {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}
