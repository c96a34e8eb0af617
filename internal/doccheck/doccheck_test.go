package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryLinks is the check CI runs: every relative link and anchor
// in the repository's Markdown (README.md, CHANGELOG.md, docs/*.md,
// examples/*/README.md, ...) resolves.
func TestRepositoryLinks(t *testing.T) {
	root, files := repository(t)
	for _, want := range []string{"README.md", "CHANGELOG.md"} {
		if !contains(files, want) {
			t.Fatalf("Files(%s) = %v: %s missing; is the root right?", root, files, want)
		}
	}
	problems, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("broken link: %s", p)
	}
	t.Logf("checked the links of %d files: %s", len(files), strings.Join(files, " "))
}

// repository returns the repository's root and its Markdown files.
func repository(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func write(t *testing.T, root, name, text string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenLinksFail shows the checker failing on deliberately broken
// links, and passing the good ones beside them.
func TestBrokenLinksFail(t *testing.T) {
	root := t.TempDir()
	write(t, root, "README.md", strings.Join([]string{
		"# Front door",
		"",
		"[guide](docs/guide.md) and [its section](docs/guide.md#the-execution-boundary-where-to-put-it)", // 3: good
		"[second of two](docs/guide.md#states-1)",                                                        // 4: good (duplicate heading)
		"[code heading](docs/guide.md#the-reconciliation-page-sentinel-serve)",                           // 5: good
		"[missing file](docs/nope.md)",                                                                   // 6: broken
		"[missing anchor](docs/guide.md#no-such-heading)",                                                // 7: broken
		"[local](#front-door) [local broken](#back-door)",                                                // 8: one good, one broken
		"![picture](docs/shot.png) ![missing picture](docs/gone.png)",                                    // 9: one good, one broken
		"[external](https://example.com/x#y) [dir](examples/)",                                           // 10: good
		"`[in code](nowhere.md)` is not a link",                                                          // 11: ignored
		"```",
		"[in a fence](nowhere.md)",
		"# not a heading: inside a fence",
		"```",
		"[escape](../outside.md)",                        // 16: broken
		"[ref]: docs/guide.md#states",                    // 17: good
		"[ref2]: docs/guide.md#not-a-state",              // 18: broken
		`<a href="docs/guide.md#anchored">html</a>`,      // 19: good (an <a name>)
		"[fence heading](#not-a-heading-inside-a-fence)", // 20: broken
		"",
	}, "\n"))
	write(t, root, "docs/guide.md", strings.Join([]string{
		"# Guide",
		"## The execution boundary: where to put it",
		"## States",
		"### States",
		"### The reconciliation page: `sentinel serve`",
		`<a name="anchored"></a>`,
		"",
	}, "\n"))
	write(t, root, "docs/shot.png", "png")
	write(t, root, "examples/x/main.go", "package main")

	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(files, " "); got != "README.md docs/guide.md" {
		t.Fatalf("Files = %q", got)
	}
	problems, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:6: docs/nope.md: no such file or directory: docs/nope.md",
		"README.md:7: docs/guide.md#no-such-heading: no heading in docs/guide.md has the anchor #no-such-heading",
		"README.md:8: #back-door: no heading in README.md has the anchor #back-door",
		"README.md:9: docs/gone.png: no such file or directory: docs/gone.png",
		"README.md:16: ../outside.md: points outside the repository",
		"README.md:18: docs/guide.md#not-a-state: no heading in docs/guide.md has the anchor #not-a-state",
		"README.md:20: #not-a-heading-inside-a-fence: no heading in README.md has the anchor #not-a-heading-inside-a-fence",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Try it: two commands":                   "try-it-two-commands",
		"Fair queue lock (`Turn`)":               "fair-queue-lock-turn",
		"9. PostgreSQL failover (Patroni)":       "9-postgresql-failover-patroni",
		"Metrics and traces (OpenTelemetry)":     "metrics-and-traces-opentelemetry",
		"Web handlers: Idempotency-Key":          "web-handlers-idempotency-key",
		"database/sql":                           "databasesql",
		"Sentinel vs DBOS (issue #27)":           "sentinel-vs-dbos-issue-27",
		"See [the guide](docs/once.md) first":    "see-the-guide-first",
		"snake_case and Ünïcode":                 "snake_case-and-ünïcode",
		"Handover in milliseconds, not the TTL":  "handover-in-milliseconds-not-the-ttl",
		"`sentinel lock`, `elect`, `queue lock`": "sentinel-lock-elect-queue-lock",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestRepositoryTables is the table check CI runs: every pipe table in
// the repository's Markdown has its header and delimiter rows, and every
// row the header's number of cells.
func TestRepositoryTables(t *testing.T) {
	root, files := repository(t)
	problems, err := Tables(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("broken table: %s", p)
	}
}

// TestBrokenTablesFail shows the table check failing on a table that lost
// its header (docs/benchmarks.md's lead table did, and rendered as a
// paragraph of pipes) and on rows of the wrong width, and passing the
// good tables beside them.
func TestBrokenTablesFail(t *testing.T) {
	root := t.TempDir()
	write(t, root, "README.md", strings.Join([]string{
		"| a | b |", // 1: good
		"|---|:--:|",
		"| 1 | `x\\|y` |",
		"",
		"| 1 | 2 |", // 5: no header
		"| 3 | 4 |",
		"",
		"a | b", // 8: not a block of | lines: ignored
		"",
		"| a | b |", // 10: good header, bad rows
		"| --- | --- |",
		"| 1 | 2 | 3 |",
		"| 1 |",
		"```",
		"| in | a fence |",
		"```",
		"",
	}, "\n"))
	problems, err := Tables(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:5: table: a block of | lines without a header and a delimiter row (|---|) renders as text",
		"README.md:12: table: 3 cells where the header has 2",
		"README.md:13: table: 1 cells where the header has 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
