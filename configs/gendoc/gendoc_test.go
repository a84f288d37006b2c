package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/configs/internal/codefacts"
)

// TestConfigurationDocUpToDate regenerates docs/configuration.md and fails
// when the committed file differs: the reference cannot drift from the code.
func TestConfigurationDocUpToDate(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := generate(root, &got); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/configuration.md is out of date (run make docs); first difference at line %d:\n  committed: %s\n  generated: %s", i+1, w, g)
			}
		}
	}
}

// TestEveryKeyDocumented: the reference has a row for every key, with its
// environment variable and a description.
func TestEveryKeyDocumented(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := generate(root, &b); err != nil {
		t.Fatal(err)
	}
	env := configs.EnvNames()
	for _, k := range configs.Keys() {
		prefix := "| `" + k + "` |"
		var line string
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
			}
		}
		if line == "" {
			t.Errorf("no row for %s", k)
			continue
		}
		if !strings.Contains(line, "`"+env[k]+"`") {
			t.Errorf("row of %s lacks %s", k, env[k])
		}
		if strings.HasSuffix(line, "|  |") {
			t.Errorf("row of %s has no description", k)
		}
	}
}

// TestMissingDescriptionFails: a key without a comment stops the generator.
func TestMissingDescriptionFails(t *testing.T) {
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	for _, f := range []string{"go.mod", "configs/config.go", "configs/sharetx.yaml", "cmd/sharetx/main.go"} {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "configs/sharetx.yaml" {
			raw = bytes.Replace(raw, []byte("# brokers of the embedded cluster, 1..9"), nil, 1)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(tmp, f)), 0o755)
		os.WriteFile(filepath.Join(tmp, f), raw, 0o644)
	}
	err = generate(tmp, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "embedded.brokers") {
		t.Fatalf("generate with embedded.brokers undocumented: %v, want an error naming it", err)
	}
}
