package sentineltest_test

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// The examples of example_test.go cannot have an "// Output:" comment:
// the code they show is a test, which needs the *testing.T of a running
// test, and an example gets none (testing.TB cannot be implemented outside
// package testing). So their test functions are copied here, run by
// TestExamplesRun, and TestExamplesMatchTheirCopies fails when an example
// and its copy differ: what the documentation shows is what runs.
var exampleCopies = map[string]func(t *testing.T){
	"ExampleNew": func(t *testing.T) { // func TestCharge(t *testing.T) {
		t.Parallel()
		client := sentineltest.New(t)
		res, err := sentinel.Once(context.Background(), client, "order-1",
			func(ctx context.Context) (string, error) { return "charged", nil })
		if err != nil || res.Value != "charged" {
			t.Fatal(res, err)
		}
	},
	"ExamplePool": func(t *testing.T) {
		ctx := context.Background()
		pool := sentineltest.Pool(t)
		if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		client := sentineltest.New(t) // same schema, same pool
		_, err := sentinel.OnceTx(ctx, client, "order-1", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('order-1')`)
			return 1, err
		})
		if err != nil {
			t.Fatal(err)
		}
	},
}

func TestExamplesRun(t *testing.T) {
	for name, fn := range exampleCopies {
		t.Run(name, fn)
	}
}

// funcLits returns the printed test function of each example (the
// function literal its body assigns to _) in example_test.go, and of each
// copy in this file.
func funcLits(t *testing.T) (examples, copies map[string]string) {
	t.Helper()
	fset := token.NewFileSet()
	print := func(n ast.Node) string {
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	examples, copies = map[string]string{}, map[string]string{}
	f, err := parser.ParseFile(fset, "example_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		for _, st := range fd.Body.List {
			if as, ok := st.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
				if lit, ok := as.Rhs[0].(*ast.FuncLit); ok {
					if ps := lit.Type.Params.List; len(ps) == 1 && print(ps[0].Type) == "*testing.T" {
						examples[fd.Name.Name] = print(lit)
					}
				}
			}
		}
	}
	f, err = parser.ParseFile(fset, "example_run_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if kv, ok := n.(*ast.KeyValueExpr); ok {
			if lit, ok := kv.Value.(*ast.FuncLit); ok {
				if k, ok := kv.Key.(*ast.BasicLit); ok {
					copies[k.Value[1:len(k.Value)-1]] = print(lit)
				}
			}
		}
		return true
	})
	return examples, copies
}

func TestExamplesMatchTheirCopies(t *testing.T) {
	examples, copies := funcLits(t)
	if len(examples) != len(exampleCopies) {
		t.Errorf("example_test.go has %d examples showing a test, exampleCopies %d: copy each", len(examples), len(exampleCopies))
	}
	for name, code := range examples {
		if copies[name] != code {
			t.Errorf("%s differs from its copy in exampleCopies:\n%s\n--- copy:\n%s", name, code, copies[name])
		}
	}
}
