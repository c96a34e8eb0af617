// Package netns gives a test a real network path it can cut: two network
// namespaces joined by a veth pair, whose addresses exist only inside
// them. A client dials from one namespace (Dial), a server listens in the
// other (Listen), and Cut makes both namespaces drop every packet between
// them (a route lookup that ends in a blackhole), so TCP on both ends sees
// what it sees behind a partition or a server that lost power: silence.
// Retransmissions go unanswered, keepalive probes go unanswered,
// TCP_USER_TIMEOUT fires; nothing is closed or reset. CutConn does the same
// to one connection only (a NAT or load balancer that forgot an idle
// flow).
//
// It needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's ip. Nothing
// is sent anywhere else: the host's own namespace gets no address and no
// route. The namespaces are deleted by Close; if the test process dies
// first, a reaper process deletes them when its stdin (held by the test
// process) closes, and New deletes those of dead test processes.
package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Addresses of the two ends. Every Path uses the same ones: they exist
// only inside its own pair of namespaces.
const (
	ClientIP = "10.213.0.1"
	ServerIP = "10.213.0.2"
)

// cutTable is the routing table whose only route is a blackhole; rules
// send the packets to cut into it.
const cutTable = "213"

const prefix = "sfn-"

var seq atomic.Int64

// Missing says why paths cannot be made here, or "".
func Missing() string {
	if os.Geteuid() != 0 {
		return "not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "iproute2's ip not found (apt-get install iproute2)"
	}
	return ""
}

// Path is a client namespace and a server namespace joined by a veth pair.
type Path struct {
	cli, srv string // namespace names
	reaper   *exec.Cmd
	reaperIn io.WriteCloser

	mu     sync.Mutex
	cut    bool
	conns  map[int]bool // client ports cut by CutConn
	closed bool
}

// New makes a path. Call Close when done.
func New() (*Path, error) {
	if why := Missing(); why != "" {
		return nil, fmt.Errorf("netns: %s", why)
	}
	sweep()
	base := fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
	p := &Path{cli: base + "-c", srv: base + "-s", conns: map[int]bool{}}
	steps := [][]string{
		{"netns", "add", p.cli},
		{"netns", "add", p.srv},
		{"-n", p.cli, "link", "set", "lo", "up"},
		{"-n", p.srv, "link", "set", "lo", "up"},
		{"-n", p.cli, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", p.srv},
		{"-n", p.cli, "addr", "add", ClientIP + "/30", "dev", "eth0"},
		{"-n", p.srv, "addr", "add", ServerIP + "/30", "dev", "eth0"},
		{"-n", p.cli, "link", "set", "eth0", "up"},
		{"-n", p.srv, "link", "set", "eth0", "up"},
		{"-n", p.cli, "route", "add", "blackhole", "default", "table", cutTable},
		{"-n", p.srv, "route", "add", "blackhole", "default", "table", cutTable},
	}
	if err := p.startReaper(); err != nil {
		return nil, err
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			_ = p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Names returns the two namespaces' names (for ip netns exec).
func (p *Path) Names() (client, server string) { return p.cli, p.srv }

// Dial connects from the client namespace.
func (p *Path) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := in(p.cli, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// DialFunc returns a DialFunc (pgconn's) that dials with d: from the
// client namespace when the address is ServerIP's, from the caller's own
// namespace otherwise (the other hosts of a multi-host connection string).
// d's keepalive settings and Control function apply.
func (p *Path) DialFunc(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != ServerIP {
			return d.DialContext(ctx, network, addr)
		}
		var c net.Conn
		err := in(p.cli, func() error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// Listen listens on ServerIP:port in the server namespace (port 0: any).
func (p *Path) Listen(port int) (net.Listener, error) {
	var l net.Listener
	err := in(p.srv, func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(ServerIP, strconv.Itoa(port)))
		return err
	})
	return l, err
}

// Cut drops every packet between the namespaces, both ways, from now on
// (established connections included) until Heal.
func (p *Path) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil
	}
	for _, ns := range []string{p.cli, p.srv} {
		if err := ip("-n", ns, "rule", "add", "pref", "100", "lookup", cutTable); err != nil {
			return err
		}
	}
	p.cut = true
	return nil
}

// CutConn drops the packets of the one connection whose client end has
// port clientPort, both ways, until Heal.
func (p *Path) CutConn(clientPort int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[clientPort] {
		return nil
	}
	port := strconv.Itoa(clientPort)
	if err := ip("-n", p.cli, "rule", "add", "pref", "101", "ipproto", "tcp", "sport", port, "lookup", cutTable); err != nil {
		return err
	}
	if err := ip("-n", p.srv, "rule", "add", "pref", "101", "ipproto", "tcp", "dport", port, "lookup", cutTable); err != nil {
		return err
	}
	p.conns[clientPort] = true
	return nil
}

// Heal ends Cut and every CutConn: packets flow again, and connections
// whose retransmissions have not given up yet resume.
func (p *Path) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if p.cut {
		for _, ns := range []string{p.cli, p.srv} {
			keep(ip("-n", ns, "rule", "del", "pref", "100", "lookup", cutTable))
		}
		p.cut = false
	}
	for port := range p.conns {
		s := strconv.Itoa(port)
		keep(ip("-n", p.cli, "rule", "del", "pref", "101", "ipproto", "tcp", "sport", s, "lookup", cutTable))
		keep(ip("-n", p.srv, "rule", "del", "pref", "101", "ipproto", "tcp", "dport", s, "lookup", cutTable))
		delete(p.conns, port)
	}
	return first
}

// Close deletes both namespaces (the veth pair goes with them). Sockets
// still open in them keep working until closed; nothing reaches them.
func (p *Path) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err1 := ip("netns", "del", p.cli)
	err2 := ip("netns", "del", p.srv)
	if p.reaperIn != nil {
		_ = p.reaper.Process.Kill()
		_ = p.reaperIn.Close()
	}
	if err1 != nil && !strings.Contains(err1.Error(), "No such file") {
		return err1
	}
	if err2 != nil && !strings.Contains(err2.Error(), "No such file") {
		return err2
	}
	return nil
}

// startReaper starts the safety net for a test process that dies without
// calling Close: a shell in its own session that waits for EOF on its
// stdin, then deletes the namespaces.
func (p *Path) startReaper() error {
	cmd := exec.Command("sh", "-c", `cat >/dev/null; ip netns del "$1" 2>/dev/null; ip netns del "$2" 2>/dev/null; exit 0`,
		"netns-reaper", p.cli, p.srv)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.reaper, p.reaperIn = cmd, in
	go func() { _ = cmd.Wait() }()
	return nil
}

// sweep deletes the namespaces of test processes that are gone.
func sweep() {
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		f := strings.SplitN(strings.TrimPrefix(name, prefix), "-", 2)
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = ip("netns", "del", name)
		}
	}
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// in runs f on an OS thread that has entered namespace ns; sockets f
// creates belong to ns for good. The thread returns to its namespace
// before it is given back to the scheduler (or dies with its goroutine if
// it cannot).
func in(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/var/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := f()
		if err := setns(orig); err != nil {
			errc <- fmt.Errorf("netns: back to the original namespace: %w", err) // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netns: setns: %w", err)
	}
	return nil
}
