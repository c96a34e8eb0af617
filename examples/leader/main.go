// Command leader is Sentinel's leader-election demo: a singleton scheduler
// in three processes. Every process runs an Elector for the group
// "scheduler"; only the leader ticks, and each tick is a write guarded by
// the leader's term (VerifyTerm in the same transaction), so a deposed
// leader cannot write even if it is paused past its lease.
//
// The demo kills the leader with SIGKILL (a follower takes over when the
// dead leader's lease expires, within the TTL), then stops the next leader
// gracefully with SIGTERM (it resigns: a follower takes over within
// milliseconds), and finally checks the ticks table: terms only increase,
// no two terms interleave, and every tick was written by its term's leader.
//
//	go run ./examples/leader
//
// It uses $DATABASE_URL when set, otherwise a throwaway PostgreSQL started
// for the run (from local server binaries, else in a Docker container).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

const (
	schema = "sentinel_leader_demo"
	group  = "scheduler"
	ttl    = time.Second
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if node := os.Getenv("LEADER_DEMO_NODE"); node != "" {
		if err := runNode(node); err != nil {
			log.Fatalf("node %s: %v", node, err)
		}
		return
	}
	if err := run(os.Stdout); err != nil {
		log.Fatalf("leader demo: %v", err)
	}
}

// runNode is one scheduler process: it campaigns until SIGTERM, and ticks
// every 100ms while it leads.
func runNode(node string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("LEADER_DEMO_DB"))
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema, DefaultTTL: ttl, Host: "node-" + node})
	if err != nil {
		return err
	}
	defer client.Close()
	el, err := client.Elector(group, sentinel.ElectorOptions{
		AppVersion: "demo-1",
		OnElected: func(ctx context.Context, term int64) {
			fmt.Printf("node %s: elected, term %d\n", node, term)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					fmt.Printf("node %s: term %d over (%v)\n", node, term, context.Cause(ctx))
					return
				case <-t.C:
					if err := tick(ctx, client, node, term); err != nil && ctx.Err() == nil {
						fmt.Printf("node %s: tick refused: %v\n", node, err)
					}
				}
			}
		},
		OnNewLeader: func(l sentinel.Leader) {
			fmt.Printf("node %s: following %s (term %d)\n", node, l.Host, l.Term)
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("node %s: ready\n", node)
	return el.Run(ctx)
}

// tick writes one scheduler tick, guarded by the term: it commits only
// while term is the group's current term.
func tick(ctx context.Context, client *sentinel.Client, node string, term int64) error {
	return pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		if err := client.VerifyTerm(ctx, tx, group, term); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+schema+".ticks (node, term) VALUES ($1, $2)", node, term)
		return err
	})
}

// run starts three nodes, kills the leader, stops the next one gracefully,
// and checks the ticks.
func run(out *os.File) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		u, cleanup, err := testdb.DemoURL(ctx, func(string, ...any) {})
		if err != nil {
			return err
		}
		defer cleanup()
		url = u
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return err
	}
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".ticks (id bigserial PRIMARY KEY, node text, term bigint, at timestamptz DEFAULT clock_timestamp())"); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	procs := map[int]*exec.Cmd{}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i := 1; i <= 3; i++ {
		cmd := exec.CommandContext(ctx, self, os.Args[1:]...)
		cmd.Env = append(os.Environ(), "LEADER_DEMO_NODE="+strconv.Itoa(i), "LEADER_DEMO_DB="+url)
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[cmd.Process.Pid] = cmd
	}

	leader := func(notTerm int64) (*sentinel.Leader, error) {
		for {
			l, err := client.Leader(ctx, group)
			if err == nil && l.Term != notTerm {
				return l, nil
			}
			if err != nil && !errors.Is(err, sentinel.ErrNoLeader) {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	first, err := leader(0)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)

	fmt.Fprintf(out, "demo: SIGKILL the leader, %s (pid %d, term %d)\n", first.Host, first.PID, first.Term)
	killed := time.Now()
	p := procs[first.PID]
	_ = p.Process.Signal(syscall.SIGKILL)
	_ = p.Wait()
	delete(procs, first.PID)
	second, err := leader(first.Term)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "demo: %s took over after %s (TTL %s)\n", second.Host, time.Since(killed).Round(time.Millisecond), ttl)
	time.Sleep(time.Second)

	fmt.Fprintf(out, "demo: SIGTERM the leader, %s (term %d): it resigns\n", second.Host, second.Term)
	stopped := time.Now()
	p = procs[second.PID]
	_ = p.Process.Signal(syscall.SIGTERM)
	third, err := leader(second.Term)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "demo: %s took over after %s\n", third.Host, time.Since(stopped).Round(time.Millisecond))
	_ = p.Wait()
	delete(procs, second.PID)
	time.Sleep(500 * time.Millisecond)

	return check(ctx, pool, out, []*sentinel.Leader{first, second, third})
}

// check verifies the ticks: written in term order, never interleaved, and
// only by the three terms' leaders, each tick by its own term's.
func check(ctx context.Context, pool *pgxpool.Pool, out *os.File, terms []*sentinel.Leader) error {
	rows, err := pool.Query(ctx, "SELECT term, count(*), min(id), max(id), min(node), max(node) FROM "+schema+".ticks GROUP BY term ORDER BY min(id)")
	if err != nil {
		return err
	}
	type span struct {
		Term, N, Lo, Hi  int64
		MinNode, MaxNode string
	}
	spans, err := pgx.CollectRows(rows, pgx.RowToStructByPos[span])
	if err != nil {
		return err
	}
	if len(spans) != len(terms) {
		return fmt.Errorf("ticks from %d terms, want %d: %+v", len(spans), len(terms), spans)
	}
	for i, s := range spans {
		fmt.Fprintf(out, "demo: term %d wrote %d ticks\n", s.Term, s.N)
		if s.Term != terms[i].Term {
			return fmt.Errorf("ticks of term %d where term %d was expected", s.Term, terms[i].Term)
		}
		if s.MinNode != s.MaxNode || "node-"+s.MinNode != terms[i].Host {
			return fmt.Errorf("ticks of term %d written by nodes %s to %s, not by its leader (%s) alone", s.Term, s.MinNode, s.MaxNode, terms[i].Host)
		}
		if i > 0 && s.Lo < spans[i-1].Hi {
			return fmt.Errorf("terms %d and %d interleave", spans[i-1].Term, s.Term)
		}
	}
	fmt.Fprintln(out, "demo: ok: one scheduler at a time, terms increasing, no stale tick")
	return nil
}
