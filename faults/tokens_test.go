package faults

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tokens must come only from statements that write the grant they belong
// to. PostgreSQL logs a sequence's WAL lazily (one record covers the next
// 32 values) and a transaction that wrote nothing else does not flush or
// wait for its commit, nor for a synchronous standby: a bare
// `SELECT nextval()` can hand out a value that a failover hands out again
// (measured: 4 of 4 crashes in ../shared/patroni-lab, seq_hole_demo.py).
// A token minted by the INSERT or UPDATE that stores it is covered by that
// write's commit, which synchronous replication waits for.
//
// This check reads every SQL string in the library's Go sources (and its
// migration files, whose functions write too) and
// requires each nextval() to sit inside an INSERT or UPDATE at its own
// nesting level (a data-modifying CTE or the statement itself). That is
// stricter than needed (any write in the same transaction would do), and
// is how every statement in the library is written.

var (
	writeRe = regexp.MustCompile(`(?is)\bINSERT\s+INTO\b|\bUPDATE\b.*\bSET\b`)
	stmtRe  = regexp.MustCompile(`(?i)\b(SELECT|INSERT|UPDATE|DELETE|WITH)\b`)
)

// levelBefore returns the text of sql before end at end's nesting level
// (nested groups left out) and the index of the '(' that opens the level
// (-1 at the top).
func levelBefore(sql string, end int) ([]byte, int) {
	var level []byte
	depth, start := 0, -1
	for j := end - 1; j >= 0; j-- {
		c := sql[j]
		if c == ')' {
			depth++
			continue
		}
		if c == '(' {
			if depth == 0 {
				start = j
				break
			}
			depth--
			continue
		}
		if depth == 0 {
			level = append(level, c)
		}
	}
	for a, b := 0, len(level)-1; a < b; a, b = a+1, b-1 {
		level[a], level[b] = level[b], level[a]
	}
	return level, start
}

// nextvalOutsideWrites returns the nextval() calls in sql that are not
// inside an INSERT or UPDATE at their nesting level, each with the text of
// that level.
func nextvalOutsideWrites(sql string) []string {
	var bad []string
	lower := strings.ToLower(sql)
	for off := 0; ; {
		i := strings.Index(lower[off:], "nextval")
		if i < 0 {
			return bad
		}
		p := off + i
		off = p + len("nextval")
		// The text of the enclosing parenthesised level before p, nested
		// groups left out; a level holding no statement keyword (a VALUES
		// list, an expression in parentheses) belongs to the level around it.
		level, start := levelBefore(sql, p)
		for start >= 0 && !stmtRe.Match(level) {
			var outer []byte
			outer, start = levelBefore(sql, start)
			level = append(outer, level...)
		}
		if !writeRe.Match(level) {
			bad = append(bad, strings.Join(strings.Fields(string(level)+sql[p:min(len(sql), p+40)]), " "))
		}
	}
}

func TestNextvalClassifier(t *testing.T) {
	ok := []string{
		`UPDATE s.leases SET owner = $1, token = pg_catalog.nextval({{seq}}) WHERE key = $2`,
		`WITH up AS (UPDATE s.t SET token = pg_catalog.nextval({{seq}}) WHERE k = $1 RETURNING token) SELECT token FROM up`,
		`INSERT INTO s.t AS t (a, token) SELECT $1, pg_catalog.nextval({{seq}}) ON CONFLICT (a) DO UPDATE SET token = pg_catalog.nextval({{seq}})`,
		`INSERT INTO s.t (a, token) VALUES ($1, nextval('s.seq'))`,
		`UPDATE s.t SET token = CASE WHEN $5::bool THEN pg_catalog.nextval({{seq}}) ELSE t.token END`,
	}
	bad := []string{
		`SELECT pg_catalog.nextval({{seq}})`,
		`SELECT nextval('s.fencing_token') AS token`,
		`WITH tok AS (SELECT pg_catalog.nextval({{seq}}) AS n) SELECT n FROM tok`,
		// txid_current() assigns a transaction id but writes no WAL the
		// commit must wait for: not a fix (patroni-lab: 2 of 3 regressed).
		`SELECT pg_catalog.nextval({{seq}}), pg_catalog.txid_current()`,
	}
	for _, q := range ok {
		require.Empty(t, nextvalOutsideWrites(q), q)
	}
	for _, q := range bad {
		require.NotEmpty(t, nextvalOutsideWrites(q), q)
	}
}

// Every nextval() in the library's SQL is inside the write that stores
// the token.
func TestTokensComeOnlyFromWritingStatements(t *testing.T) {
	root := filepath.Join("..")
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "run from the faults package directory")
	var found int
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (bench, containers)
			}
			return nil
		}
		if strings.HasSuffix(path, ".sql") {
			// A migration: functions it defines mint tokens too.
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			found += strings.Count(strings.ToLower(string(b)), "nextval")
			for _, bad := range nextvalOutsideWrites(string(b)) {
				t.Errorf("%s: nextval() outside a writing statement: %q", path, bad)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || !strings.Contains(strings.ToLower(lit.Value), "nextval") {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				s = lit.Value
			}
			found += strings.Count(strings.ToLower(s), "nextval")
			for _, b := range nextvalOutsideWrites(s) {
				t.Errorf("%s: nextval() outside a writing statement: %q", fset.Position(lit.Pos()), b)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	// The library mints tokens for leases, Once, elections and queues: a
	// scan that finds fewer read nothing.
	require.GreaterOrEqual(t, found, 8, "nextval() calls found in the library's SQL")
	t.Logf("%d nextval() calls checked", found)
}
