package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Worker processes are this test binary re-executed with workerEnv set to
// a mode; TestMain dispatches to runWorker before any test runs. They talk
// to the driver through stdout (one line per event, each written with a
// single write(2), so the driver sees every line written before a SIGKILL)
// and read commands from stdin. A worker exits when its stdin reaches EOF,
// so none outlives the driver.
const workerEnv = "SENTINEL_FAULTS_WORKER"

// child is a running worker process.
type child struct {
	name   string
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	stderr *syncBuffer
	lines  chan string   // every stdout line, closed at EOF
	exited chan struct{} // closed once the process has been reaped
	err    error         // cmd.Wait's error, valid after exited

	mu   sync.Mutex
	last string // last stdout line
}

// spawn starts a worker in mode with extra environment variables. onLine,
// if set, is called from the reader goroutine for each stdout line before
// it is queued on lines, so it can react (e.g. kill) with little delay.
// lines is buffered; a caller that uses onLine may ignore lines.
func spawn(t testing.TB, name, mode string, env []string, onLine func(c *child, line string)) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), workerEnv+"="+mode), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &child{name: name, cmd: cmd, stderr: &syncBuffer{}, lines: make(chan string, 1<<16), exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting worker %s: %v", name, err)
	}
	c.pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.last = line
			c.mu.Unlock()
			if onLine != nil {
				onLine(c, line)
			}
			select {
			case c.lines <- line:
			default: // nobody reads lines: drop
			}
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// kill sends SIGKILL (and SIGCONT, in case it is stopped).
func (c *child) kill() {
	_ = syscall.Kill(c.pid, syscall.SIGKILL)
	_ = syscall.Kill(c.pid, syscall.SIGCONT)
}

// stop kills the worker if it still runs and waits for it.
func (c *child) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	c.kill()
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
	}
}

// signal sends sig to the worker.
func (c *child) signal(sig syscall.Signal) error { return syscall.Kill(c.pid, sig) }

// send writes a command line to the worker's stdin.
func (c *child) send(cmd string) error {
	_, err := io.WriteString(c.stdin, cmd+"\n")
	return err
}

// lastLine returns the last stdout line read so far.
func (c *child) lastLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// hasExited reports whether the worker has been reaped.
func (c *child) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// exitCode returns the worker's exit status after it exited: the exit
// code, or -1 when a signal ended it.
func (c *child) exitCode() int {
	<-c.exited
	return c.cmd.ProcessState.ExitCode()
}

// expect reads lines until one starts with prefix, and returns it (its
// fields). It fails the test when the worker exits or timeout passes
// first. Lines read on the way are passed to skip, if set.
func (c *child) expect(t testing.TB, prefix string, timeout time.Duration, skip func(string)) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited
				t.Fatalf("worker %s exited (%v) while waiting for %q; stderr:\n%s", c.name, c.err, prefix, c.stderr.tail(30))
			}
			if strings.HasPrefix(line, prefix) {
				return strings.Fields(line)
			}
			if skip != nil {
				skip(line)
			}
		case <-deadline.C:
			t.Fatalf("worker %s: no %q line within %s (last line %q); stderr:\n%s", c.name, prefix, timeout, c.lastLine(), c.stderr.tail(30))
		}
	}
}

// processState returns the state letter of /proc/PID/stat ('T' when
// stopped).
func processState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// --- worker side ---

// runWorker is the body of a worker process.
func runWorker(mode string) int {
	cmds := make(chan string, 16)
	go func() { // stdin: commands; EOF means the driver is gone
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		os.Exit(3)
	}()
	var err error
	switch mode {
	case "once":
		err = onceWorker()
	case "holder":
		err = holderWorker(cmds)
	case "rerun":
		err = rerunWorker()
	default:
		err = fmt.Errorf("unknown worker mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %s: %v\n", mode, err)
		emit("fatal %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

var emitMu sync.Mutex

// emit writes one event line to stdout in a single write.
func emit(format string, args ...any) {
	line := fmt.Sprintf(format, args...) + "\n"
	emitMu.Lock()
	defer emitMu.Unlock()
	_, _ = os.Stdout.Write([]byte(line))
}

// envDuration reads a duration from the environment.
func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}
