// Command gendoc writes docs/configuration.md, the configuration reference,
// from the code, so that it cannot drift from it:
//
//	go run ./configs/gendoc > docs/configuration.md   # make docs
//
// The keys, their types and nesting come from configs.Config by reflection
// (yaml tags), the defaults from configs.Default(), the environment variable
// names from configs.EnvNames(), the flags from cmd/sharetx/main.go, and the
// descriptions from the comments of the example file configs/sharetx.yaml
// (or, where it has none, from the field's comment in configs/config.go).
// A key without any description is an error. The test in this directory
// regenerates the file and fails when the committed one differs.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/configs/internal/codefacts"
)

func main() {
	root, err := codefacts.RepoRoot()
	if err == nil {
		err = generate(root, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

// goDocs are the comments of configs/config.go: the package's, each struct
// type's, and each field's (by "Type.Field").
type goDocs struct {
	pkg    string
	types  map[string]string
	fields map[string]string
}

func readGoDocs(path string) (goDocs, error) {
	d := goDocs{types: map[string]string{}, fields: map[string]string{}}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		return d, err
	}
	d.pkg = f.Doc.Text()
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			doc := ts.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			d.types[ts.Name.Name] = doc.Text()
			for _, fl := range st.Fields.List {
				text := strings.TrimSpace(fl.Doc.Text() + " " + fl.Comment.Text())
				for _, n := range fl.Names {
					d.fields[ts.Name.Name+"."+n.Name] = text
				}
			}
		}
	}
	return d, nil
}

// yamlDocs maps each dotted key of the example file to its comment (the
// comment above the key, then the one after its value).
func readYAMLDocs(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			walk(n.Content[0], prefix)
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := k.Value
			if prefix != "" {
				key = prefix + "." + key
			}
			var parts []string
			for _, c := range []string{k.HeadComment, k.LineComment, v.LineComment} {
				if c = commentText(c); c != "" {
					parts = append(parts, c)
				}
			}
			out[key] = strings.Join(parts, " ")
			walk(v, key)
		}
	}
	walk(&doc, "")
	return out, nil
}

// commentText turns YAML comment lines into one line of prose.
func commentText(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		words = append(words, line)
	}
	s := strings.Join(words, " ")
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "..."), "..."))
	return strings.Join(strings.Fields(s), " ")
}

type section struct {
	key  string // dotted path of the struct
	doc  string
	rows []row
}

type row struct {
	key, typ, def, env, doc string
}

func generate(root string, w io.Writer) error {
	gd, err := readGoDocs(filepath.Join(root, "configs", "config.go"))
	if err != nil {
		return err
	}
	yd, err := readYAMLDocs(filepath.Join(root, "configs", "sharetx.yaml"))
	if err != nil {
		return err
	}
	flags, err := codefacts.Flags(root)
	if err != nil {
		return err
	}
	env := configs.EnvNames()
	var sections []*section
	var missing []string
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		sec := &section{key: prefix, doc: yd[prefix]}
		if sec.doc == "" {
			sec.doc = oneLine(gd.types[t.Name()])
		}
		if prefix != "" {
			sections = append(sections, sec)
		}
		var nested []int
		for i := 0; i < t.NumField(); i++ {
			name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			if v.Field(i).Kind() == reflect.Struct {
				nested = append(nested, i)
				continue
			}
			doc := yd[key]
			if doc == "" {
				doc = oneLine(gd.fields[t.Name()+"."+t.Field(i).Name])
			}
			if doc == "" {
				missing = append(missing, key)
			}
			sec.rows = append(sec.rows, row{key: key, typ: typeName(v.Field(i).Type()), def: defaultText(v.Field(i)), env: env[key], doc: doc})
		}
		for _, i := range nested {
			name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			walk(v.Field(i), key)
		}
	}
	def := configs.Default()
	walk(reflect.ValueOf(def), "")
	if len(missing) > 0 {
		return fmt.Errorf("no description for %s: add a comment to configs/sharetx.yaml", strings.Join(missing, ", "))
	}
	var n int
	for _, s := range sections {
		n += len(s.rows)
	}
	if n != len(configs.Keys()) {
		return errors.New("the reflected schema and configs.Keys() disagree")
	}

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Configuration reference\n\n")
	p("<!-- Generated by `go run ./configs/gendoc` (make docs) from configs/config.go, configs.Default(),\n")
	p("     configs/sharetx.yaml and cmd/sharetx/main.go. Do not edit: a test fails when it differs. -->\n\n")
	p("%s\n\n", oneLine(strings.TrimPrefix(gd.pkg, "Package configs holds ")))
	p("Precedence, lowest first: the defaults below, the YAML file given with `--config`, the `SHARETX_*`\n")
	p("environment variables, the command-line flags. `sharetx --check-config` validates the result and\n")
	p("exits. The example file [`configs/sharetx.yaml`](../configs/sharetx.yaml) sets every key; a\n")
	p("Kubernetes ConfigMap for a sidecar is in [`configs/k8s/sidecar/configmap.yaml`](../configs/k8s/sidecar/configmap.yaml).\n\n")
	p("Durations are written as Go durations (`500ms`, `10s`, `1m`, `1h`). In environment variables, lists\n")
	p("are comma separated and maps are written `k=v,k=v`.\n\n")

	p("## Command-line flags\n\n| flag | what |\n|---|---|\n")
	names := make([]string, 0, len(flags))
	for f := range flags {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		p("| `--%s` | %s |\n", f, cell(flags[f]))
	}
	p("\n")
	for _, s := range sections {
		depth := strings.Count(s.key, ".")
		p("%s `%s`\n\n", strings.Repeat("#", 2+min(depth, 1)), s.key)
		if s.doc != "" {
			p("%s\n\n", s.doc)
		}
		if len(s.rows) == 0 {
			continue
		}
		p("| key | type | default | environment variable | description |\n|---|---|---|---|---|\n")
		for _, r := range s.rows {
			p("| `%s` | %s | %s | `%s` | %s |\n", r.key, r.typ, r.def, r.env, cell(r.doc))
		}
		p("\n")
	}
	_, err = w.Write(bytes.TrimRight(b.Bytes(), "\n"))
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

var durationType = reflect.TypeOf(time.Duration(0))

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.Int:
		return "integer"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "list of strings"
	case t.Kind() == reflect.Map:
		return "map node id → port"
	}
	return t.String()
}

func defaultText(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return "`" + shortDuration(time.Duration(v.Int())) + "`"
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return "*(empty)*"
		}
		return "`" + v.String() + "`"
	case v.Kind() == reflect.Slice, v.Kind() == reflect.Map:
		if v.Len() == 0 {
			return "*(empty)*"
		}
		return "`" + fmt.Sprint(v.Interface()) + "`"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// shortDuration writes 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell escapes text for a Markdown table cell: pipes end cells, and
// <words> would be taken for HTML.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(oneLine(s))
}
