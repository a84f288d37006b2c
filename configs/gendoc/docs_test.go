package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/configs/internal/codefacts"
)

// pendingTargets are make targets that work in progress elsewhere adds; a
// document may name them before they land. Remove a name once its target is
// in the Makefile.
var pendingTargets = map[string]bool{}

// repoDirs are the top-level folders a path in the docs may start with (a
// path under one of them must exist).
var repoDirs = []string{"cmd/", "configs/", "intercept/", "proxy/", "staging/", "markers/", "upstream/", "client/", "e2e/", "docs/", "java/", "examples/", "kip1289/"}

var (
	testNameRe = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*`)
	envRe      = regexp.MustCompile(`\bSHARETX_[A-Z0-9_]*[A-Z0-9]`)
	codeRe     = regexp.MustCompile("`([^`\n]+)`")
	keyRe      = regexp.MustCompile(`^(listen|upstream|limits|timeouts|metrics|log|embedded|kip1289)\.[a-z0-9_.]*[a-z0-9_]`)
	makeRe     = regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`)
	linkRe     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRe  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+)$`)
	chaosRe    = regexp.MustCompile("chaos `([a-z-]+)`")
	fileRe     = regexp.MustCompile(`\.(go|md|ya?ml|json|sh)$`)
)

type doc struct {
	path string // relative to the root
	text string
}

func docs(t *testing.T, root string) []doc {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	paths = append(paths, filepath.Join(root, "README.md"))
	var out []doc
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, doc{filepath.ToSlash(rel), string(raw)})
	}
	if len(out) < 7 {
		t.Fatalf("only %d documents found", len(out))
	}
	return out
}

// slug is GitHub's anchor for a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRe.FindAllStringSubmatch(text, -1) {
		out[slug(strings.ReplaceAll(m[1], "`", ""))] = true
	}
	return out
}

// checkDocs returns every statement of the documents that the code does
// not bear out.
func checkDocs(root string, ds []doc) ([]error, error) {
	tests, err := codefacts.Tests(root)
	if err != nil {
		return nil, err
	}
	metrics, err := codefacts.Metrics(root)
	if err != nil {
		return nil, err
	}
	targets, err := codefacts.MakeTargets(root)
	if err != nil {
		return nil, err
	}
	envs := map[string]bool{}
	for _, e := range configs.EnvNames() {
		envs[e] = true
	}
	keys := configs.Keys()
	isKey := func(k string) bool {
		for _, full := range keys {
			if full == k || strings.HasPrefix(full, k+".") {
				return true
			}
		}
		return false
	}
	chaosReadme, err := os.ReadFile(filepath.Join(root, "e2e", "chaos", "README.md"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range ds {
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf(d.path+": "+format, args...))
		}
		for _, n := range uniq(testNameRe.FindAllString(d.text, -1)) {
			if tests[n] == "" {
				fail("names test %s, which no _test.go file defines", n)
			}
		}
		for _, s := range codefacts.SeriesRefs(d.text) {
			if _, ok := codefacts.Resolve(metrics, s); !ok {
				fail("names series %s, which the code does not register", s)
			}
		}
		for _, e := range uniq(envRe.FindAllString(d.text, -1)) {
			if !envs[e] {
				fail("names %s, which is not a sharetx setting", e)
			}
		}
		for _, m := range makeRe.FindAllStringSubmatch(d.text, -1) {
			if !targets[m[1]] && !pendingTargets[m[1]] {
				fail("names make %s, which the Makefile does not define", m[1])
			}
		}
		for _, m := range codeRe.FindAllStringSubmatch(d.text, -1) {
			code := m[1]
			if k := keyRe.FindString(code); k != "" && !fileRe.MatchString(code) && !isKey(strings.TrimSuffix(k, ".")) {
				fail("names configuration key %s, which configs.Config does not have", k)
			}
			for _, dir := range repoDirs {
				if strings.HasPrefix(code, dir) && !strings.ContainsAny(code, " *<>") {
					if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(code, "/"))); err != nil {
						fail("names %s, which is not in the repository", code)
					}
				}
			}
		}
		for _, m := range linkRe.FindAllStringSubmatch(d.text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(link, "#")
			target := filepath.Join(root, filepath.Dir(d.path), file)
			if file == "" {
				target = filepath.Join(root, d.path)
			}
			raw, err := os.ReadFile(target)
			if err != nil {
				if fi, serr := os.Stat(target); serr == nil && fi.IsDir() {
					continue
				}
				fail("links to %s, which does not exist", link)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchors(string(raw))[anchor] {
				fail("links to %s: %s has no heading with that anchor", link, file)
			}
		}
		for _, m := range chaosRe.FindAllStringSubmatch(d.text, -1) {
			if !strings.Contains(string(chaosReadme), "| `"+m[1]+"` |") {
				fail("names chaos fault %s, which e2e/chaos does not inject", m[1])
			}
		}
	}
	return errs, nil
}

func uniq(s []string) []string {
	sort.Strings(s)
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// TestDocsMatchCode: every test, series, setting, environment variable,
// make target, path, link and chaos fault the documents name exists.
func TestDocsMatchCode(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	errs, err := checkDocs(root, docs(t, root))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
}

// TestDocsCheckFails: the check reports a renamed test, series, key,
// variable, target, path, link and anchor.
func TestDocsCheckFails(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"proven by `TestKIP1289ProxyKiled`",
		"see sharetx_tx_pending_record",
		"set `kip1289.close_holds`",
		"SHARETX_KIP1289_CLOSEHOLD=1m",
		"run make deploycheck",
		"in `intercept/96_txn.go`",
		"in `java/examples/NoSuchExample.java`",
		"[x](nowhere.md)",
		"[x](operations.md#no-such-heading)",
		"chaos `proxy-restart`",
	} {
		errs, err := checkDocs(root, []doc{{"docs/broken.md", "# broken\n\n" + bad + "\n"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) == 0 {
			t.Errorf("%q: not reported", bad)
		}
	}
}

// TestOperationsListsEverySeries: operations.md's metrics table has every
// series the code registers.
func TestOperationsListsEverySeries(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := codefacts.Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	for name := range metrics {
		if !strings.Contains(string(raw), "`"+name+"`") {
			t.Errorf("docs/operations.md does not list %s", name)
		}
	}
}

// TestFailureMatrixRowsHaveTests: every row of guarantees.md's failure
// matrix names a test or a chaos fault that proves it.
func TestFailureMatrixRowsHaveTests(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "## The failure matrix")
	end := strings.Index(text, "## Windows that are not exactly-once")
	if start < 0 || end < start {
		t.Fatal("guarantees.md lost its failure matrix or its windows section")
	}
	rows := 0
	for _, line := range strings.Split(text[start:end], "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| fault") || strings.HasPrefix(line, "|---") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		last := cells[len(cells)-1]
		if !testNameRe.MatchString(last) && !chaosRe.MatchString(last) {
			t.Errorf("row %q names no test", cells[0])
		}
	}
	if rows < 20 {
		t.Errorf("only %d rows in the failure matrix", rows)
	}
}
