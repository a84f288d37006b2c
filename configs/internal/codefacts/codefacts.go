// Package codefacts reads facts about sharetx out of its own Go sources —
// the Prometheus series it registers, the flags and HTTP paths of
// cmd/sharetx, the test functions — so that the deployment files and the
// documentation under configs/ and docs/ can be checked against the code
// offline, by parsing, without building or running any of it.
//
// Parsing rather than importing keeps these checks independent of the
// packages they describe: a manifest test must not need a Kafka cluster, and
// must not break because an unrelated package is half-way through a change.
package codefacts

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Module is the module path of the repository.
const Module = "github.com/sharetx/sharetx"

// RepoRoot finds the repository root (the directory of sharetx's go.mod)
// from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(raw)), "module "+Module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("codefacts: no go.mod of " + Module + " above the working directory")
		}
		dir = parent
	}
}

// Metric is one Prometheus series family the code registers.
type Metric struct {
	Name   string   // full name, e.g. sharetx_tx_pending_records
	Type   string   // counter, gauge, histogram or summary
	Labels []string // variable labels of a *Vec, in order
	Help   string
	File   string // where it is constructed, relative to the root
}

// Metrics lists every series constructed with prometheus.New<Type>[Vec] and
// an options literal whose Namespace is "sharetx" (or whose Name starts with
// "sharetx_"), in the non-test Go files under root. A sharetx series whose
// name is not a string literal is an error: it could not be checked.
func Metrics(root string) (map[string]Metric, error) {
	out := map[string]Metric{}
	err := eachGoFile(root, false, func(rel string, f *ast.File, fset *token.FileSet) error {
		var ferr error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			fn, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !isIdent(fn.X, "prometheus") || !strings.HasPrefix(fn.Sel.Name, "New") {
				return true
			}
			typ := metricType(fn.Sel.Name)
			opts, ok := call.Args[0].(*ast.CompositeLit)
			if typ == "" || !ok {
				return true
			}
			fields := map[string]ast.Expr{}
			for _, el := range opts.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok {
						fields[k.Name] = kv.Value
					}
				}
			}
			ns, _ := stringLit(fields["Namespace"])
			sub, _ := stringLit(fields["Subsystem"])
			name, nameOK := stringLit(fields["Name"])
			if ns != "sharetx" && !strings.HasPrefix(name, "sharetx_") {
				return true
			}
			if !nameOK {
				ferr = fmt.Errorf("%s: a sharetx series whose Name is not a string literal", fset.Position(call.Pos()))
				return false
			}
			full := name
			for _, p := range []string{sub, ns} {
				if p != "" {
					full = p + "_" + full
				}
			}
			help, _ := stringLit(fields["Help"])
			m := Metric{Name: full, Type: typ, Help: help, File: rel}
			if strings.HasSuffix(fn.Sel.Name, "Vec") && len(call.Args) > 1 {
				if lit, ok := call.Args[1].(*ast.CompositeLit); ok {
					for _, el := range lit.Elts {
						if s, ok := stringLit(el); ok {
							m.Labels = append(m.Labels, s)
						}
					}
				}
			}
			if prev, dup := out[full]; dup && prev.File != rel {
				ferr = fmt.Errorf("series %s is constructed in both %s and %s", full, prev.File, rel)
				return false
			}
			out[full] = m
			return true
		})
		return ferr
	})
	return out, err
}

func metricType(constructor string) string {
	switch strings.TrimSuffix(strings.TrimPrefix(constructor, "New"), "Vec") {
	case "Counter", "CounterFunc":
		return "counter"
	case "Gauge", "GaugeFunc":
		return "gauge"
	case "Histogram":
		return "histogram"
	case "Summary":
		return "summary"
	}
	return ""
}

// seriesRef matches a sharetx series name as written in PromQL or prose.
var seriesRef = regexp.MustCompile(`\bsharetx_[a-z0-9_]*[a-z0-9]`)

// SeriesRefs returns the sharetx_* names referenced in text, with the
// histogram suffixes (_bucket, _sum, _count) kept: Resolve maps them.
func SeriesRefs(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range seriesRef.FindAllString(text, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve maps a referenced series name to the metric family it belongs to:
// name itself, or for a histogram or summary its _bucket, _sum and _count
// series. ok is false if no registered family explains the name.
func Resolve(metrics map[string]Metric, name string) (Metric, bool) {
	if m, ok := metrics[name]; ok {
		return m, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suf)
		if !found {
			continue
		}
		m, ok := metrics[base]
		if ok && (m.Type == "histogram" || (m.Type == "summary" && suf != "_bucket")) {
			return m, true
		}
	}
	return Metric{}, false
}

// Flags lists the command-line flags cmd/sharetx defines (fs.String("name",
// ...), fs.Bool, ...), mapped to their usage text.
func Flags(root string) (map[string]string, error) {
	f, err := parseFile(filepath.Join(root, "cmd", "sharetx", "main.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 3 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !isIdent(sel.X, "fs") {
			return true
		}
		switch sel.Sel.Name {
		case "String", "Bool", "Int", "Duration", "Int64", "Uint", "Float64":
		default:
			return true
		}
		name, ok1 := stringLit(call.Args[0])
		usage, ok2 := stringLit(call.Args[len(call.Args)-1])
		if ok1 && ok2 {
			out[name] = usage
		}
		return true
	})
	if len(out) == 0 {
		return nil, errors.New("codefacts: no flags found in cmd/sharetx/main.go")
	}
	return out, nil
}

// HTTPPaths lists the paths cmd/sharetx serves on metrics.address
// (mux.Handle / mux.HandleFunc with a literal pattern).
func HTTPPaths(root string) ([]string, error) {
	f, err := parseFile(filepath.Join(root, "cmd", "sharetx", "main.go"))
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
			return true
		}
		if p, ok := stringLit(call.Args[0]); ok && strings.HasPrefix(p, "/") {
			out = append(out, p)
		}
		return true
	})
	if len(out) == 0 {
		return nil, errors.New("codefacts: no HTTP paths found in cmd/sharetx/main.go")
	}
	sort.Strings(out)
	return out, nil
}

// Tests maps every top-level Test*, Fuzz* and Benchmark* function in the
// repository's _test.go files to its file, relative to root.
func Tests(root string) (map[string]string, error) {
	out := map[string]string{}
	err := eachGoFile(root, true, func(rel string, f *ast.File, _ *token.FileSet) error {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			for _, p := range []string{"Test", "Fuzz", "Benchmark"} {
				if strings.HasPrefix(fd.Name.Name, p) {
					out[fd.Name.Name] = rel
				}
			}
		}
		return nil
	})
	return out, err
}

// MakeTargets lists the targets the Makefile at root defines.
func MakeTargets(root string) (map[string]bool, error) {
	fh, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:([^=]|$)`)
	out := map[string]bool{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "#") {
			continue
		}
		if m := rule.FindStringSubmatch(line); m != nil {
			for _, t := range strings.Fields(m[1]) {
				if !strings.HasPrefix(t, ".") {
					out[t] = true
				}
			}
		}
	}
	return out, sc.Err()
}

// MakeVar returns the value of a `NAME ?= value` or `NAME := value`
// assignment in the Makefile at root.
func MakeVar(root, name string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return "", err
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[?:]?=\s*(.*?)\s*$`)
	m := re.FindSubmatch(raw)
	if m == nil {
		return "", fmt.Errorf("codefacts: the Makefile does not set %s", name)
	}
	return string(m[1]), nil
}

func eachGoFile(root string, tests bool, fn func(rel string, f *ast.File, fset *token.FileSet) error) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "target" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") != tests {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		return fn(filepath.ToSlash(rel), f, fset)
	})
}

func parseFile(path string) (*ast.File, error) {
	return parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// stringLit returns the value of a string literal, or of a concatenation of
// string literals.
func stringLit(e ast.Expr) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if v.Op != token.ADD {
			return "", false
		}
		a, ok1 := stringLit(v.X)
		b, ok2 := stringLit(v.Y)
		return a + b, ok1 && ok2
	}
	return "", false
}
