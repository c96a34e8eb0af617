package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Program is a complete Go program printed in a Markdown file: a ```go
// fence whose code starts with `package main`.
type Program struct {
	File string // relative to the root, slash-separated
	Line int    // of the fence's first line of code
	Code string
}

// Programs lists the complete Go programs of files (relative to root).
// Fragments (fences without a package clause) are not programs.
func Programs(root string, files []string) ([]Program, error) {
	var out []Program
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var (
			in, isGo bool
			indent   string
			start    int
			code     []string
		)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			trimmed := strings.TrimLeft(line, " \t")
			if !in {
				if strings.HasPrefix(trimmed, "```") {
					in, isGo, indent, start, code = true, strings.TrimSpace(trimmed[3:]) == "go", line[:len(line)-len(trimmed)], n+1, nil
				}
				continue
			}
			if strings.HasPrefix(trimmed, "```") {
				in = false
				src := strings.Join(code, "\n") + "\n"
				if isGo && regexp.MustCompile(`^\s*(//.*\n\s*)*package main\b`).MatchString(src) {
					out = append(out, Program{File: f, Line: start, Code: src})
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

// TestProgramsBuild builds every complete Go program the Markdown prints
// (README.md's first Once, leases.md's two workers, testing.md's test file
// of the README's program, vetted beside it) against this
// checkout, as a reader who copies it into a module with a replace
// directive would: a program that no longer compiles against the current
// API fails here. Fragments are TestFragmentsBuild's.
func TestProgramsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, files := repository(t)
	progs, err := Programs(root, files)
	if err != nil {
		t.Fatal(err)
	}
	var readme bool
	for _, p := range progs {
		readme = readme || p.File == "README.md"
	}
	if !readme {
		t.Fatalf("no program found in README.md among %d: is the extraction right?", len(progs))
	}
	dir := tempModule(t, root, "example.com/docprograms")
	// A test file (package main without func main: testing.md's) goes
	// beside the README's program, the one it tests.
	where := map[string]Program{}
	readmeDir := ""
	for i, p := range progs {
		if !hasMain(p.Code) {
			continue
		}
		name := fmt.Sprintf("p%03d", i)
		where[name+"/main.go"] = p
		if p.File == "README.md" && readmeDir == "" {
			readmeDir = name
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(p.Code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if readmeDir == "" {
		t.Fatal("README.md has no program with func main")
	}
	for i, p := range progs {
		if hasMain(p.Code) {
			continue
		}
		name := fmt.Sprintf("%s/t%03d_test.go", readmeDir, i)
		where[name] = p
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(p.Code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goBin, "vet", "./...")
	cmd.Dir = dir
	// The checkout's go.sum; modules not yet in the cache come from the
	// configured proxy (CI runs this before anything else is built).
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := string(out)
		for name, p := range where {
			msg = strings.ReplaceAll(msg, name+":", fmt.Sprintf("%s (program at line %d), line ", p.File, p.Line))
		}
		t.Fatalf("the programs of the Markdown do not build: %v\n%s", err, msg)
	}
	for _, p := range progs {
		t.Logf("built the program of %s:%d", p.File, p.Line)
	}
}

func hasMain(code string) bool {
	return regexp.MustCompile(`(?m)^func main\(\)`).MatchString(code)
}
