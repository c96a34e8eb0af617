// Package ctxcalls lists a package's exported calls that take a
// context.Context, read from its source, for the tests that require every
// such call to refuse a nil ctx: a call added without the check is missing
// from their table and fails them.
package ctxcalls

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
)

// Exported returns the exported functions and methods of exported types
// declared in dir's non-test Go files that have a context.Context
// parameter, as "Func" or "Type.Method", sorted.
func Exported(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ctxName := contextImport(f)
		if ctxName == "" {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() || !takesContext(fd.Type.Params, ctxName) {
				continue
			}
			call := fd.Name.Name
			if fd.Recv != nil {
				recv := receiverType(fd.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				call = recv + "." + call
			}
			out = append(out, call)
		}
	}
	slices.Sort(out)
	return out, nil
}

// contextImport returns the name package context is imported under in f,
// or "" if f does not import it.
func contextImport(f *ast.File) string {
	for _, imp := range f.Imports {
		if imp.Path.Value != `"context"` {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return "context"
	}
	return ""
}

func takesContext(params *ast.FieldList, ctxName string) bool {
	for _, p := range params.List {
		sel, ok := p.Type.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Context" {
			continue
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == ctxName {
			return true
		}
	}
	return false
}

// receiverType returns the name of a receiver's type: T for T, *T, T[P]
// and *T[P].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
