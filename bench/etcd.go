package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// errNoEtcd reports that no etcd server binary is installed; a benchmark
// then skips its etcd peer and says so in the report.
var errNoEtcd = errors.New("etcd binary not found in $PATH (Debian/Ubuntu: apt-get install etcd-server); the etcd peer is skipped")

// startEtcd starts a single-node etcd server on free loopback ports, with
// its data in a temporary directory, and waits until it is healthy. stop
// terminates it and removes the data. When no etcd binary is installed the
// error matches errNoEtcd.
func startEtcd(ctx context.Context) (endpoints []string, stop func(), err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errNoEtcd, err)
	}
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return nil, nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin,
		"--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "error")
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = io.Discard, &limitedWriter{w: logs, n: 64 << 10}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("starting etcd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = os.RemoveAll(dir)
	}
	// Healthy once /health answers {"health":"true"}.
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", nil)
		if resp, err := hc.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if strings.Contains(string(b), `"health":"true"`) {
				return []string{client}, stop, nil
			}
		}
		select {
		case <-exited:
			stop()
			return nil, nil, fmt.Errorf("etcd exited before it was healthy: %s", logs.String())
		case <-ctx.Done():
			stop()
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("etcd not healthy within 30s: %s", logs.String())
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
