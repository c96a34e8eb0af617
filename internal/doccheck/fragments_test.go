package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A Fragment is a ```go fence of a Markdown file that is not a complete
// program (TestProgramsBuild builds those): a few statements, or
// declarations (a func, a type, an import). TestFragmentsBuild compiles
// every one of them against the checkout, so a renamed option or a
// changed signature in a snippet fails the build instead of the reader.
//
// A fence that is deliberately not Go (pseudo-code, output) is fenced as
// text (```text, ```console) or says so on the line before it, with a
// reason:
//
//	<!-- doccheck: skip (a module of its own, not in this module's graph) -->
//	```go
//
// A skip without a reason is a problem, so no fence is left out silently.
type Fragment struct {
	File string // relative to the root, slash-separated
	Line int    // of the fence's first line of code
	Code string
	Skip string // the reason given in a skip comment, if any
}

// skipComment is the marker on the line before a fence that is not to be
// compiled; the reason in parentheses is required.
var skipComment = regexp.MustCompile(`^\s*<!--\s*doccheck:\s*skip\b\s*(?:\((.*)\))?\s*-->\s*$`)

// Fragments lists the ```go fences of files (relative to root) that are
// not complete programs (no package main clause).
func Fragments(root string, files []string) ([]Fragment, error) {
	var out []Fragment
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var (
			in, isGo   bool
			indent     string
			start      int
			code       []string
			prev, skip string
			skipped    bool
		)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			trimmed := strings.TrimLeft(line, " \t")
			if !in {
				if strings.HasPrefix(trimmed, "```") {
					in, isGo, indent, start, code = true, strings.TrimSpace(trimmed[3:]) == "go", line[:len(line)-len(trimmed)], n+1, nil
					skip, skipped = "", false
					if m := skipComment.FindStringSubmatch(prev); m != nil {
						skip, skipped = strings.TrimSpace(m[1]), true
						if skip == "" {
							return nil, fmt.Errorf("%s:%d: a doccheck skip without a reason: write <!-- doccheck: skip (why this is not Go) -->", f, n-1)
						}
					}
				} else if strings.TrimSpace(line) != "" {
					prev = line
				}
				continue
			}
			if strings.HasPrefix(trimmed, "```") {
				in = false
				prev = ""
				src := strings.Join(code, "\n") + "\n"
				if skipped && !isGo {
					return nil, fmt.Errorf("%s:%d: a doccheck skip before a fence that is not ```go: remove it", f, start-2)
				}
				if isGo && !programClause.MatchString(src) {
					out = append(out, Fragment{File: f, Line: start, Code: src, Skip: skip})
				}
				continue
			}
			code = append(code, strings.TrimPrefix(line, indent))
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var programClause = regexp.MustCompile(`^\s*(//.*\n\s*)*package main\b`)

// fragmentImports are the packages a fragment may use without importing
// them, by the names the docs use. An import the fragment does not use is
// dropped (its "imported and not used" error is ignored).
var fragmentImports = []string{
	"context",
	"database/sql",
	"encoding/json",
	"errors",
	"fmt",
	"log",
	"net/http",
	"os",
	"testing",
	"time",
	"github.com/jackc/pgx/v5",
	"github.com/jackc/pgx/v5/pgxpool",
	"github.com/jackc/pgx/v5/stdlib",
	"github.com/sentinel-coordination/sentinel",
	"github.com/sentinel-coordination/sentinel/console",
	"github.com/sentinel-coordination/sentinel/idempotency",
	"github.com/sentinel-coordination/sentinel/otelsentinel",
	"github.com/sentinel-coordination/sentinel/sentineltest",
}

// elided is a line that is only "..." (code the reader writes): it
// becomes a panic, which ends the block as a return would.
var elided = regexp.MustCompile(`(?m)^(\s*)\.\.\.(\s*//.*)?$`)

// fragmentFile returns the Go file (of package pkg) that compiles fr,
// and the number of lines put before its code. A fragment that parses as
// declarations goes at file level (its own imports kept); otherwise its
// statements go in the body of a func returning error (a "return err"
// compiles), after which a "return nil" stands.
func fragmentFile(pkg string, fr Fragment) (src string, offset int) {
	code := elided.ReplaceAllString(fr.Code, `${1}panic("elided")$2`)
	head := "package " + pkg + "\n\n"
	own := map[string]bool{}
	f, err := parser.ParseFile(token.NewFileSet(), "", head+code, 0)
	decls := err == nil
	if decls {
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			own[p] = true
		}
	}
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("import (\n")
	for _, p := range fragmentImports {
		if !own[p] {
			fmt.Fprintf(&b, "\t%q\n", p)
		}
	}
	b.WriteString(")\n\n")
	if !decls {
		b.WriteString("func _() error {\n")
	}
	offset = strings.Count(b.String(), "\n")
	b.WriteString(code)
	if !decls {
		b.WriteString("return nil\n}\n")
	}
	return b.String(), offset
}

// The compiler's errors a fragment may cause: a fragment need not use
// every variable it declares (the reader's code goes on after it), nor
// every package of fragmentImports (an import of its own it must use).
var (
	unusedVar    = regexp.MustCompile(`: declared and not used: `)
	unusedImport = regexp.MustCompile(`: "[^"]+" imported (as \w+ )?and not used$`)
)

// goError says whether out holds a line of the go command's own error (a
// module it cannot find), other than its progress lines ("go: downloading
// m v", printed on a machine whose module cache lacks a dependency: CI's
// fresh machine).
func goError(out []byte) bool {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "go: ") && !strings.HasPrefix(line, "go: downloading ") {
			return true
		}
	}
	return false
}

// compileError is a line of the compiler's output naming a position.
var compileError = regexp.MustCompile(`^(?:\./)?([^\s:]+\.go):(\d+):(?:(\d+):)? (.*)$`)

// buildFragments compiles frags against the module at modRoot, one package per Markdown file (its fragments
// side by side with testdata/fragments/prelude.go), in one go build, and
// returns the errors, each at its Markdown line.
func buildFragments(t *testing.T, modRoot string, frags []Fragment) []Problem {
	t.Helper()
	dir := tempModule(t, modRoot, "example.com/docfragments")
	prelude, err := os.ReadFile(filepath.Join("testdata", "fragments", "prelude.go"))
	if err != nil {
		t.Fatal(err)
	}
	type origin struct {
		fr     Fragment
		offset int
	}
	where := map[string]origin{}
	pkgs := map[string]string{} // Markdown file -> package directory
	var syntax []Problem
	for _, fr := range frags {
		if fr.Skip != "" {
			continue
		}
		pkgDir, ok := pkgs[fr.File]
		if !ok {
			pkgDir = fmt.Sprintf("d%03d", len(pkgs))
			pkgs[fr.File] = pkgDir
			if err := os.MkdirAll(filepath.Join(dir, pkgDir), 0o755); err != nil {
				t.Fatal(err)
			}
			p := bytes.Replace(prelude, []byte("package fragments"), []byte("package "+pkgDir), 1)
			if err := os.WriteFile(filepath.Join(dir, pkgDir, "prelude.go"), p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("%s/line%05d.go", pkgDir, fr.Line)
		src, offset := fragmentFile(pkgDir, fr)
		// A syntax error would stop the type check of the whole package:
		// report it here and leave the fragment out, so the others of its
		// file are still checked.
		// The first error only: the ones after it follow from it.
		if _, err := parser.ParseFile(token.NewFileSet(), name, src, 0); err != nil {
			list, ok := err.(scanner.ErrorList)
			if !ok || len(list) == 0 {
				t.Fatal(err)
			}
			line := fr.Line + list[0].Pos.Line - 1 - offset
			line = min(max(line, fr.Line), fr.Line+strings.Count(fr.Code, "\n")-1)
			syntax = append(syntax, Problem{File: fr.File, Line: line,
				Target: "go fragment at line " + strconv.Itoa(fr.Line), Reason: "syntax error: " + list[0].Msg})
			continue
		}
		where[name] = origin{fr, offset}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	problems := syntax
	if len(where) == 0 {
		sortProblems(problems)
		return problems
	}
	cmd := exec.Command("go", "build", "-gcflags=-e", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		sortProblems(problems)
		return problems
	}
	nerr := len(problems)
	for _, line := range strings.Split(string(out), "\n") {
		m := compileError.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		o, ok := where[m[1]]
		if !ok {
			t.Fatalf("fragments: an error outside the fragments (in the prelude?):\n%s", out)
		}
		n, _ := strconv.Atoi(m[2])
		if unusedVar.MatchString(line) || unusedImport.MatchString(line) && n <= o.offset {
			continue
		}
		problems = append(problems, Problem{File: o.fr.File, Line: o.fr.Line + n - 1 - o.offset,
			Target: "go fragment at line " + strconv.Itoa(o.fr.Line), Reason: m[4]})
	}
	if len(problems) == nerr && goError(out) {
		t.Fatalf("fragments: go build failed without an error this test understands:\n%s", out)
	}
	sortProblems(problems)
	return problems
}

// sortProblems orders problems by file and line.
func sortProblems(problems []Problem) {
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
}

// tempModule writes a module that requires the module at root through a
// replace directive, with root's go line and go.sum, as a reader who
// copies a snippet into a module of theirs would have it.
func tempModule(t *testing.T, root, path string) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module " + path + "\n\n" + string(goLine) + "\n\n" +
		"require github.com/sentinel-coordination/sentinel v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/sentinel-coordination/sentinel => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFragmentsBuild compiles every Go fragment of the repository's
// Markdown (the fences TestProgramsBuild does not build) against this
// checkout: a snippet that calls a renamed option or a changed signature
// fails here. The names a fragment uses without declaring them (ctx,
// client, pool, the reader's Receipt or chargeCard) are declared in
// testdata/fragments/prelude.go.
func TestFragmentsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fragments")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root, all := repository(t)
	// README.md and the guides; an example's README (examples/river)
	// prints code of its own module, with dependencies of its own.
	var files []string
	for _, f := range all {
		if f == "README.md" || strings.HasPrefix(f, "docs/") {
			files = append(files, f)
		}
	}
	frags, err := Fragments(root, files)
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	for _, fr := range frags {
		once = once || fr.File == "docs/once.md"
	}
	if !once {
		t.Fatalf("no fragment found in docs/once.md among %d: is the extraction right?", len(frags))
	}
	for _, p := range buildFragments(t, root, frags) {
		t.Errorf("a Go fragment does not compile: %s", p)
	}
	skipped := 0
	for _, fr := range frags {
		if fr.Skip != "" {
			skipped++
			t.Logf("skipped %s:%d: %s", fr.File, fr.Line, fr.Skip)
		}
	}
	t.Logf("compiled %d fragments (%d skipped)", len(frags)-skipped, skipped)
}

// TestBrokenFragmentsFail shows the fragment check failing on snippets
// that call a renamed option, give a function the wrong arguments, are
// not Go, or skip without a reason, and passing the good ones beside them.
func TestBrokenFragmentsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fragments")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	modRoot, _ := repository(t)
	root := t.TempDir()
	write(t, root, "README.md", strings.Join([]string{
		"# Snippets",
		"```go",
		"lease, err := client.Lease(ctx, key, sentinel.WithTTL(3*time.Second)) // 3: good",
		"if err != nil {",
		"    return err",
		"}",
		"...",
		"```",
		"```go",
		"lease, err := client.Lease(ctx, key, sentinel.WithTimeToLive(3*time.Second)) // 10: a renamed option",
		"```",
		"```go",
		"func handle(w http.ResponseWriter, r *http.Request) {",
		"    res, err := sentinel.Once(r.Context(), \"k\", func(ctx context.Context) (int, error) { return 1, nil }) // 14: no client",
		"}",
		"```",
		"```go",
		"if err := client.Migrate(ctx); err != nil { ... } // 18: not Go (docs/operating.md's was so)",
		"```",
		"<!-- doccheck: skip (pseudo-code) -->",
		"```go",
		"take the lease; do the work",
		"```",
		"```text",
		"not go at all",
		"```",
		"",
	}, "\n"))
	frags, err := Fragments(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) != 5 || frags[4].Skip != "pseudo-code" {
		t.Fatalf("Fragments = %+v, want 5, the last skipped", frags)
	}
	var got []string
	for _, p := range buildFragments(t, modRoot, frags) {
		at := fmt.Sprintf("%s:%d", p.File, p.Line)
		if !contains(got, at) {
			got = append(got, at)
		}
		t.Log(p)
	}
	want := []string{"README.md:10", "README.md:14", "README.md:18"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("problems at %v, want at %v", got, want)
	}

	write(t, root, "docs/a.md", "<!-- doccheck: skip -->\n```go\nx\n```\n")
	if _, err := Fragments(root, []string{"docs/a.md"}); err == nil || !strings.Contains(err.Error(), "without a reason") {
		t.Errorf("a skip without a reason: err = %v", err)
	}
}

// The go command's progress lines on a machine whose module cache lacks a
// fragment's dependency (CI's fresh machine) are not an error of its own:
// the fragments' compile errors are read past them. CI failed on them once.
func TestGoErrorIgnoresDownloads(t *testing.T) {
	downloads := "go: downloading go.opentelemetry.io/otel v1.45.0\n# example.com/docfragments/d000\nd000/line00018.go:5:2: \"os\" imported and not used\n"
	if goError([]byte(downloads)) {
		t.Errorf("goError(%q) = true: a download is not an error", downloads)
	}
	missing := "go: downloading example.com/x v1.0.0\ngo: example.com/x@v1.0.0: reading https://proxy/x: 404 Not Found\n"
	if !goError([]byte(missing)) {
		t.Errorf("goError(%q) = false: a module it cannot get is", missing)
	}
}
