// Package lockmodel is a sequential specification of a fenced lease (a lock
// with expiry and fencing tokens) for the porcupine linearizability checker,
// and a recorder for histories of lease operations.
//
// The model, per key:
//
//   - Acquire that succeeds returns a token greater than every token granted
//     before it, and only when nobody holds a live lease.
//   - Acquire that is refused needs a live holder (and, when the refusal
//     names the holder's token, that holder).
//   - Release that deletes the lease needs the current token; a release
//     refused as stale needs a token that is not current.
//   - A guarded write accepted under a token (VerifyToken, then the write,
//     committed together) needs that token to be current and live.
//   - Held(token) is a holder's local belief "my lease is still valid" (taken
//     before its local deadline and before Done closed): the lease must be
//     current and live at that instant.
//
// Expiry is time-based and the model has no clock, so it is modelled as
// nondeterminism: a live lease may expire before any operation. Ops whose
// outcome the client could not learn (a network error) are Unknown: either
// they took effect or they did not.
//
// Everything that can break fencing is an illegal history under this model:
// a token not larger than an earlier one, a grant while another holder is
// provably still valid, a stale write or release accepted after a newer
// grant returned. The package's tests feed such histories and require the
// checker to reject them.
package lockmodel

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation on a lease.
type Kind uint8

// Operation kinds.
const (
	Acquire Kind = iota
	Release
	Write
	Held
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	case Write:
		return "write"
	case Held:
		return "held"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Result is an operation's observed outcome.
type Result uint8

// Outcomes.
const (
	OK      Result = iota // granted, released, write accepted, belief held
	Refused               // not acquired (held), release stale, write refused
	Unknown               // the client could not learn the outcome (error)
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Input is an operation's call.
type Input struct {
	Kind   Kind
	Key    string
	Client int
	Token  int64 // the token used (Release, Write, Held); 0 for Acquire
}

// Output is an operation's return.
type Output struct {
	Result Result
	// Token: for an Acquire that succeeded, the granted token; for a
	// refused Acquire, the holder's token when it was reported (0 if not).
	Token int64
}

// state is the per-key model state. cur is the current holder's token, 0
// when free, anonymous when an Acquire with an unknown outcome may have
// granted a token nobody saw.
type state struct {
	cur   int64
	alive bool
	max   int64 // largest token known to have been granted
}

const anonymous = -1

// expirations returns s and, when s is live, s after its lease expired.
func expirations(s state) []state {
	if s.alive {
		return []state{s, {cur: s.cur, alive: false, max: s.max}}
	}
	return []state{s}
}

func step(s state, in Input, out Output) []any {
	var next []any
	switch in.Kind {
	case Acquire:
		switch out.Result {
		case OK:
			for _, e := range expirations(s) {
				if !e.alive && out.Token > e.max {
					next = append(next, state{cur: out.Token, alive: true, max: out.Token})
				}
			}
		case Refused:
			if !s.alive {
				break
			}
			switch {
			case out.Token == 0 || out.Token == s.cur:
				next = append(next, s)
			case s.cur == anonymous && out.Token > s.max:
				// The holder whose grant we never saw is revealed.
				next = append(next, state{cur: out.Token, alive: true, max: out.Token})
			}
		case Unknown:
			next = append(next, s)
			for _, e := range expirations(s) {
				if !e.alive {
					next = append(next, state{cur: anonymous, alive: true, max: e.max})
				}
			}
		}
	case Release:
		switch out.Result {
		case OK:
			if s.cur == in.Token {
				next = append(next, state{cur: 0, alive: false, max: s.max})
			}
		case Refused:
			if s.cur != in.Token {
				next = append(next, s)
			}
		case Unknown:
			next = append(next, s)
			if s.cur == in.Token {
				next = append(next, state{cur: 0, alive: false, max: s.max})
			}
		}
	case Write:
		switch out.Result {
		case OK:
			switch {
			case s.alive && s.cur == in.Token:
				next = append(next, s)
			case s.alive && s.cur == anonymous && in.Token > s.max:
				next = append(next, state{cur: in.Token, alive: true, max: in.Token})
			}
		case Refused:
			// Always explainable: the lease may have expired.
			for _, e := range expirations(s) {
				next = append(next, e)
			}
		case Unknown:
			next = append(next, s)
		}
	case Held:
		if s.alive && s.cur == in.Token {
			next = append(next, s)
		}
	}
	return next
}

// Model returns the porcupine model: nondeterministic (expiry), partitioned
// by key.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{state{}} },
		Step: func(s, in, out any) []any {
			return step(s.(state), in.(Input), out.(Output))
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(Input), out.(Output)
			s := fmt.Sprintf("c%d %s(%s", i.Client, i.Kind, i.Key)
			if i.Token != 0 {
				s += fmt.Sprintf(", %d", i.Token)
			}
			s += ") -> " + o.Result.String()
			if o.Token != 0 {
				s += fmt.Sprintf(" %d", o.Token)
			}
			return s
		},
		DescribeState: func(s any) string {
			st := s.(state)
			return fmt.Sprintf("{cur %d alive %v max %d}", st.cur, st.alive, st.max)
		},
	}
	return nm.ToModel()
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(Input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// Check runs the linearizability checker on history. It returns
// porcupine.Ok, porcupine.Illegal, or porcupine.Unknown when timeout (0 =
// none) passed first.
func Check(history []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(Model(), history, timeout)
}

// CheckVerbose is Check that also writes a visualization of the history to
// path (an HTML file), for investigating a failure.
func CheckVerbose(history []porcupine.Operation, timeout time.Duration, path string) (porcupine.CheckResult, error) {
	m := Model()
	res, info := porcupine.CheckOperationsVerbose(m, history, timeout)
	return res, porcupine.VisualizePath(m, info, path)
}

// Recorder collects a history from concurrent clients, timestamped on one
// monotonic clock. The zero value is not usable; call NewRecorder.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
}

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Now returns the recorder's clock reading (monotonic nanoseconds).
func (r *Recorder) Now() int64 { return int64(time.Since(r.base)) }

// At converts a local time.Time (with a monotonic reading) to the
// recorder's clock.
func (r *Recorder) At(t time.Time) int64 { return int64(t.Sub(r.base)) }

// Add records one operation that was called at call and returned at ret.
func (r *Recorder) Add(in Input, call int64, out Output, ret int64) {
	if ret < call {
		ret = call
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: in.Client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// History returns a copy of the recorded operations.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Counts returns how many operations of each kind were recorded.
func (r *Recorder) Counts() map[Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[Kind]int{}
	for _, op := range r.ops {
		m[op.Input.(Input).Kind]++
	}
	return m
}

// IllegalKeys checks each key of history on its own and returns the keys
// (at most maxKeys, in key order) whose history is not linearizable.
func IllegalKeys(history []porcupine.Operation, timeout time.Duration, maxKeys int) []string {
	m := Model()
	var keys []string
	for _, ops := range partition(history) {
		if len(keys) == maxKeys {
			break
		}
		if porcupine.CheckOperationsTimeout(m, ops, timeout) == porcupine.Illegal {
			keys = append(keys, ops[0].Input.(Input).Key)
		}
	}
	return keys
}

// Explain describes the operations of history on each of keys, ordered by
// call, with times in milliseconds from the key's first call: what a
// failing test prints (for the keys IllegalKeys names) so that a reader
// can tell a recording artifact from a fencing defect without re-running.
func Explain(history []porcupine.Operation, keys []string) string {
	m := Model()
	var b strings.Builder
	for _, ops := range partition(history) {
		key := ops[0].Input.(Input).Key
		if !slices.Contains(keys, key) {
			continue
		}
		ops = append([]porcupine.Operation(nil), ops...)
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		base := ops[0].Call
		fmt.Fprintf(&b, "key %s:\n", key)
		for _, op := range ops {
			fmt.Fprintf(&b, "  [%9.3f, %9.3f] ms  %s\n", float64(op.Call-base)/1e6, float64(op.Return-base)/1e6,
				m.DescribeOperation(op.Input, op.Output))
		}
	}
	return b.String()
}
