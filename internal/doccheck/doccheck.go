// Package doccheck checks the links of the repository's Markdown files:
// every relative link must name a file or directory that exists, and every
// anchor (#heading) must name a heading of its target, slugged the way
// GitHub renders it. Its test runs over the repository in `go test ./...`
// and in .ci/run, so a guide renamed or a heading reworded without its
// links fails CI. It checks the pipe tables too (a header and a delimiter
// row, every row as wide as the header). Its tests also build every
// complete Go program the Markdown prints (a go fence starting with
// package main) against the checkout, so a program a reader copies keeps
// compiling, and compile every other go fence of README.md and docs/ (a
// fragment: statements, or a func) with the names it assumes declared in
// testdata/fragments/prelude.go; a fence that is not Go says so with
// <!-- doccheck: skip (reason) --> on the line before it.
package doccheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one link that does not resolve.
type Problem struct {
	File   string // relative to the root, slash-separated
	Line   int    // 1-based
	Target string // the link as written
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// Files lists the Markdown files under root (slash-separated, relative to
// root, sorted), skipping hidden directories and testdata.
func Files(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// Check checks every link of files (relative to root) and returns the
// ones that do not resolve, in file and line order.
func Check(root string, files []string) ([]Problem, error) {
	c := checker{root: root, anchors: map[string]map[string]bool{}}
	var problems []Problem
	for _, f := range files {
		links, err := c.links(f)
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			if reason := c.resolve(f, l.target); reason != "" {
				problems = append(problems, Problem{File: f, Line: l.line, Target: l.target, Reason: reason})
			}
		}
	}
	return problems, nil
}

type link struct {
	line   int
	target string
}

type checker struct {
	root    string
	anchors map[string]map[string]bool // file -> anchors it defines
}

var (
	// [text](dest) and ![alt](dest), with an optional title; dest may be
	// in angle brackets.
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^()\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// [label]: dest
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// <a href="..."> and <img src="...">
	htmlLink = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*"([^"]*)"`)
	// <a name="..."> or id="..." define anchors too.
	htmlAnchor = regexp.MustCompile(`(?i)<[a-z]+\s[^>]*?(?:name|id)\s*=\s*"([^"]*)"`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$`)
)

// scan calls fn for every line of f outside fenced code blocks, with
// inline code spans removed when strip is set.
func (c *checker) scan(f string, strip bool, fn func(n int, line string)) error {
	file, err := os.Open(filepath.Join(c.root, filepath.FromSlash(f)))
	if err != nil {
		return err
	}
	defer file.Close()
	s := bufio.NewScanner(file)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	fence := ""
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		trimmed := strings.TrimLeft(line, " \t>-*+0123456789.")
		trimmed = strings.TrimLeft(trimmed, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			ch := trimmed[:1]
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, ch))]
			continue
		}
		if strip {
			line = stripCodeSpans(line)
		}
		fn(n, line)
	}
	return s.Err()
}

func (c *checker) links(f string) ([]link, error) {
	var links []link
	err := c.scan(f, true, func(n int, line string) {
		add := func(dest string) {
			dest = strings.TrimSuffix(strings.TrimPrefix(dest, "<"), ">")
			links = append(links, link{line: n, target: dest})
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			add(m[1])
		}
		for _, m := range htmlLink.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
	})
	return links, err
}

// resolve returns why target, linked from file f, does not resolve, or ""
// when it does.
func (c *checker) resolve(f, target string) string {
	if target == "" {
		return "empty link"
	}
	u, err := url.Parse(target)
	if err != nil {
		return "not a URL: " + err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		return "" // external: not checked here
	}
	dest := f
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			return "absolute path: link relative to this file"
		}
		dest = path.Join(path.Dir(f), u.Path)
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "points outside the repository"
		}
		info, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(dest)))
		if err != nil {
			return "no such file or directory: " + dest
		}
		if info.IsDir() && u.Fragment != "" {
			return "an anchor on a directory"
		}
	}
	if u.Fragment == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	anchors, err := c.anchorsOf(dest)
	if err != nil {
		return "reading " + dest + ": " + err.Error()
	}
	if !anchors[strings.ToLower(u.Fragment)] {
		return fmt.Sprintf("no heading in %s has the anchor #%s", dest, u.Fragment)
	}
	return ""
}

func (c *checker) anchorsOf(f string) (map[string]bool, error) {
	if a, ok := c.anchors[f]; ok {
		return a, nil
	}
	a := map[string]bool{}
	seen := map[string]int{}
	err := c.scan(f, false, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			a[strings.ToLower(m[1])] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := Slug(m[2])
		if n := seen[s]; n > 0 {
			a[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	})
	if err != nil {
		return nil, err
	}
	c.anchors[f] = a
	return a, nil
}

var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// Slug is the anchor GitHub gives a heading: its text (links reduced to
// their text) lowercased, every character that is not a letter, a digit,
// a mark, '-' or '_' removed, and each space made a '-'.
func Slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// stripCodeSpans removes the inline code spans of line: a run of
// backticks up to the next run of the same length.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := len(line[i:]) - len(strings.TrimLeft(line[i:], "`"))
		run := line[i : i+n]
		rest := line[i+n:]
		end := -1
		for off := 0; ; {
			j := strings.Index(rest[off:], run)
			if j < 0 {
				break
			}
			j += off
			k := j + n
			if k < len(rest) && rest[k] == '`' { // a longer run: not the closer
				off = k + len(rest[k:]) - len(strings.TrimLeft(rest[k:], "`"))
				continue
			}
			end = j
			break
		}
		if end < 0 { // no closer: the backticks are literal
			b.WriteString(line[:i+n])
			line = rest
			continue
		}
		b.WriteString(line[:i])
		line = rest[end+n:]
	}
}

// delimiterRow is a table's second line: cells of dashes, each with an
// optional colon at either end.
var delimiterRow = regexp.MustCompile(`^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)

// Tables checks the pipe tables of files (relative to root): a block of
// lines starting with '|' (outside code fences) is a table only when its
// second line is the delimiter row, so a block without one renders as a
// paragraph of pipes; and every row must have as many cells as the
// header, or GitHub drops the extra ones and leaves the missing ones
// blank. It returns one problem per faulty block or row.
func Tables(root string, files []string) ([]Problem, error) {
	c := checker{root: root}
	var problems []Problem
	for _, f := range files {
		var block []int   // line numbers of the current block
		var rows []string // its lines
		flush := func() {
			defer func() { block, rows = nil, nil }()
			if len(rows) == 0 {
				return
			}
			if len(rows) < 2 || !delimiterRow.MatchString(rows[1]) {
				problems = append(problems, Problem{File: f, Line: block[0], Target: "table",
					Reason: "a block of | lines without a header and a delimiter row (|---|) renders as text"})
				return
			}
			want := cells(rows[0])
			for i, r := range rows {
				if got := cells(r); got != want {
					problems = append(problems, Problem{File: f, Line: block[i], Target: "table",
						Reason: fmt.Sprintf("%d cells where the header has %d", got, want)})
				}
			}
		}
		err := c.scan(f, false, func(n int, line string) {
			if strings.HasPrefix(strings.TrimSpace(line), "|") {
				if len(block) > 0 && block[len(block)-1] != n-1 {
					flush()
				}
				block = append(block, n)
				rows = append(rows, strings.TrimSpace(line))
				return
			}
			flush()
		})
		if err != nil {
			return nil, err
		}
		flush()
	}
	return problems, nil
}

// cells counts the cells of a table row: the pipes that separate them,
// not counting a leading or trailing one, nor an escaped one (\|). As in
// GitHub's tables, a pipe inside a code span separates cells too.
func cells(row string) int {
	row = strings.ReplaceAll(row, `\|`, "")
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	return strings.Count(row, "|") + 1
}
