package lockmodel

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// h builds a history from compact operations on key "k".
type op struct {
	client    int
	kind      Kind
	token     int64 // input token
	res       Result
	outToken  int64
	call, ret int64
}

func history(ops ...op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		out = append(out, porcupine.Operation{
			ClientId: o.client,
			Input:    Input{Kind: o.kind, Key: "k", Client: o.client, Token: o.token},
			Output:   Output{Result: o.res, Token: o.outToken},
			Call:     o.call, Return: o.ret,
		})
	}
	return out
}

func acq(c int, tok int64, call, ret int64) op {
	return op{client: c, kind: Acquire, res: OK, outToken: tok, call: call, ret: ret}
}

func TestLegalHistories(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"acquire, write, release, next acquire": history(
			acq(0, 5, 0, 10),
			op{client: 0, kind: Held, token: 5, call: 15, ret: 15},
			op{client: 0, kind: Write, token: 5, res: OK, call: 20, ret: 30},
			op{client: 1, kind: Acquire, res: Refused, outToken: 5, call: 22, ret: 28},
			op{client: 0, kind: Release, token: 5, res: OK, call: 40, ret: 50},
			acq(1, 7, 60, 70),
			op{client: 0, kind: Write, token: 5, res: Refused, call: 75, ret: 80},
			op{client: 0, kind: Release, token: 5, res: Refused, call: 81, ret: 82},
		),
		"expiry then takeover; the stale holder's write is refused": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 20, 30),
			op{client: 0, kind: Write, token: 5, res: Refused, call: 40, ret: 50},
		),
		"holder's belief concurrent with the next grant": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 20, 30),
			op{client: 0, kind: Held, token: 5, call: 25, ret: 25},
		),
		"a write that straddles the next grant linearizes before it": history(
			acq(0, 5, 0, 10),
			op{client: 0, kind: Write, token: 5, res: OK, call: 15, ret: 40},
			acq(1, 7, 20, 30),
		),
		"an acquire with an unknown outcome may have granted": history(
			op{client: 0, kind: Acquire, res: Unknown, call: 0, ret: 10},
			op{client: 1, kind: Acquire, res: Refused, outToken: 9, call: 20, ret: 30},
			acq(1, 12, 40, 50),
		),
		// faults' rerun scenario, key rr-k0093 (2026-11-26): a worker
		// killed after its claim committed, before any line of its own,
		// holds token 38, which another worker's refusal names.
		"a call cut short by a kill may have been granted the token a refusal names": history(
			acq(1, 29, 0, 6),
			op{client: 1, kind: Write, token: 29, res: OK, call: 29, ret: 31},
			op{client: 2, kind: Acquire, res: Unknown, call: 1500, ret: 1800},
			op{client: 3, kind: Acquire, res: Refused, outToken: 38, call: 1764, ret: 1767},
			acq(4, 137, 3989, 4001),
			op{client: 4, kind: Write, token: 137, res: OK, call: 4025, ret: 4026},
			op{client: 4, kind: Release, token: 137, res: OK, call: 4053, ret: 4056},
		),
		"an unknown release of the current token may have freed it": history(
			acq(0, 5, 0, 10),
			op{client: 0, kind: Release, token: 5, res: Unknown, call: 20, ret: 30},
			acq(1, 6, 31, 32),
		),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res := Check(h, 10*time.Second); res != porcupine.Ok {
				t.Fatalf("checker says %s for a legal history", res)
			}
		})
	}
}

// The checker must reject every way fencing can break. Each of these is a
// deliberately broken history.
func TestBrokenHistoriesAreRejected(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"token not larger than an earlier grant's": history(
			acq(0, 7, 0, 10),
			op{client: 0, kind: Release, token: 7, res: OK, call: 11, ret: 12},
			acq(1, 5, 20, 30),
		),
		"same token granted twice": history(
			acq(0, 7, 0, 10),
			op{client: 0, kind: Release, token: 7, res: OK, call: 11, ret: 12},
			acq(1, 7, 20, 30),
		),
		"stale write accepted after a newer grant returned": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 20, 30),
			op{client: 0, kind: Write, token: 5, res: OK, call: 40, ret: 50},
		),
		"two holders overlap: a belief after the next grant returned": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 20, 30),
			op{client: 0, kind: Held, token: 5, call: 31, ret: 31},
		),
		"grant while the holder provably still held it": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 12, 18),
			op{client: 0, kind: Write, token: 5, res: OK, call: 20, ret: 40},
		),
		"stale release succeeded after a newer grant": history(
			acq(0, 5, 0, 10),
			acq(1, 7, 20, 30),
			op{client: 0, kind: Release, token: 5, res: OK, call: 40, ret: 50},
		),
		"refusal names a holder that had released": history(
			acq(0, 5, 0, 10),
			op{client: 0, kind: Release, token: 5, res: OK, call: 20, ret: 30},
			op{client: 1, kind: Acquire, res: Refused, outToken: 5, call: 40, ret: 50},
		),
		"a refusal names a token no acquire could have granted": history(
			acq(1, 29, 0, 6),
			op{client: 3, kind: Acquire, res: Refused, outToken: 38, call: 1764, ret: 1767},
			acq(4, 137, 3989, 4001),
		),
		"refused while nobody held it": history(
			op{client: 1, kind: Acquire, res: Refused, call: 0, ret: 10},
		),
		"release of the current token refused as stale": history(
			acq(0, 5, 0, 10),
			op{client: 0, kind: Release, token: 5, res: Refused, call: 20, ret: 30},
		),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res := Check(h, 10*time.Second); res != porcupine.Illegal {
				t.Fatalf("checker says %s for a broken history, want %s", res, porcupine.Illegal)
			}
		})
	}
}

// Keys are independent: a violation on one key is found among many legal
// ones, and grants on different keys do not constrain each other.
func TestPartitionByKey(t *testing.T) {
	var h []porcupine.Operation
	for i, k := range []string{"a", "b", "c"} {
		h = append(h, porcupine.Operation{
			Input:  Input{Kind: Acquire, Key: k, Client: i},
			Output: Output{Result: OK, Token: int64(10 - i)}, Call: int64(i * 10), Return: int64(i*10 + 5),
		})
	}
	if res := Check(h, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("independent keys: %s", res)
	}
	h = append(h, porcupine.Operation{
		Input:  Input{Kind: Acquire, Key: "b", Client: 3},
		Output: Output{Result: OK, Token: 3}, Call: 100, Return: 105,
	})
	if res := Check(h, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("double grant on key b: %s, want Illegal", res)
	}
}

func TestRecorderAndVisualization(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call := r.Now()
			r.Add(Input{Kind: Acquire, Key: "k", Client: c}, call, Output{Result: Unknown}, r.Now())
		}()
	}
	wg.Wait()
	if n := len(r.History()); n != 4 || r.Counts()[Acquire] != 4 {
		t.Fatalf("recorded %d ops, counts %v", n, r.Counts())
	}
	path := filepath.Join(t.TempDir(), "h.html")
	res, err := CheckVerbose(r.History(), 10*time.Second, path)
	if err != nil || res != porcupine.Ok {
		t.Fatalf("check: %s, %v", res, err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "acquire(k)") {
		t.Fatalf("visualization: %v", err)
	}
}

func TestExplainNamesOnlyTheIllegalKeys(t *testing.T) {
	bad := history(
		acq(0, 5, 0, 1_000_000),
		acq(1, 7, 2_000_000, 3_000_000),
		op{client: 0, kind: Write, token: 5, res: OK, call: 4_000_000, ret: 5_000_000},
	)
	good := history(acq(2, 9, 0, 10))
	for i := range good {
		in := good[i].Input.(Input)
		in.Key = "fine"
		good[i].Input = in
	}
	all := append(bad, good...)
	if keys := IllegalKeys(all, 10*time.Second, 10); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("IllegalKeys = %q, want [k]", keys)
	}
	got := Explain(all, []string{"k"})
	want := "key k:\n" +
		"  [    0.000,     1.000] ms  c0 acquire(k) -> ok 5\n" +
		"  [    2.000,     3.000] ms  c1 acquire(k) -> ok 7\n" +
		"  [    4.000,     5.000] ms  c0 write(k, 5) -> ok\n"
	if got != want {
		t.Fatalf("Explain:\n%s\nwant:\n%s", got, want)
	}
	if keys := IllegalKeys(good, 10*time.Second, 10); len(keys) != 0 {
		t.Fatalf("a legal history has illegal keys %q", keys)
	}
}
