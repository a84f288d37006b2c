package main

import (
	"archive/zip"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// TestJavaLibraryPackaging builds the Java library as a release would (mvn
// package, in a copy of java/ so that it does not race the other Java tests
// over java/target) and checks what a Java team depends on: the jar names
// its automatic module, the sources and javadoc jars are attached and hold
// the public API, and the POM carries the metadata a public repository
// requires (description, url, license, scm, developers).
func TestJavaLibraryPackaging(t *testing.T) {
	sim.NeedJava(t)
	if testing.Short() {
		t.Skip("-short: no Maven build")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pom.xml", "src/main"} {
		if out, err := exec.Command("cp", "-r", filepath.Join("../../java", p), filepath.Join(dir, p)).CombinedOutput(); err != nil {
			t.Fatalf("copying java/%s: %v\n%s", p, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"-B", "-q", "package", "-DskipTests"}
	if os.Getenv("MVN_OFFLINE") == "1" {
		args = append(args, "-o")
	}
	cmd := exec.CommandContext(ctx, "mvn", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mvn package: %v\n%s", err, lastLines(string(out), 40))
	}
	base := filepath.Join(dir, "target", "sharetx-clients-0.1.0-SNAPSHOT")

	files := func(jar string) map[string]string {
		t.Helper()
		zr, err := zip.OpenReader(jar)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		m := map[string]string{}
		for _, f := range zr.File {
			if f.Name == "META-INF/MANIFEST.MF" {
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				m[f.Name] = string(b)
				continue
			}
			m[f.Name] = ""
		}
		return m
	}
	jar := files(base + ".jar")
	if !strings.Contains(jar["META-INF/MANIFEST.MF"], "Automatic-Module-Name: io.sharetx.clients") {
		t.Errorf("the jar's manifest names no automatic module:\n%s", jar["META-INF/MANIFEST.MF"])
	}
	if _, ok := jar["io/sharetx/clients/SharetxProducer.class"]; !ok {
		t.Error("the jar has no SharetxProducer class")
	}
	api := []string{"SharetxProducer", "TransactionalShareAcknowledger", "ShareAcknowledgements", "ShareGroupMetadata", "ShareTransactions"}
	src := files(base + "-sources.jar")
	doc := files(base + "-javadoc.jar")
	for _, c := range api {
		if _, ok := src["io/sharetx/clients/"+c+".java"]; !ok {
			t.Errorf("the sources jar has no %s.java", c)
		}
		// Under the module's directory: javadoc documents the automatic module.
		if !hasSuffix(doc, "io/sharetx/clients/"+c+".html") {
			t.Errorf("the javadoc jar has no page for %s", c)
		}
	}
	if _, ok := doc["index.html"]; !ok {
		t.Error("the javadoc jar has no index.html")
	}

	raw, err := os.ReadFile(filepath.Join(dir, "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var pom struct {
		Description string `xml:"description"`
		URL         string `xml:"url"`
		Licenses    []struct {
			Name string `xml:"name"`
			URL  string `xml:"url"`
		} `xml:"licenses>license"`
		Developers []struct {
			Name string `xml:"name"`
		} `xml:"developers>developer"`
		SCM struct {
			Connection string `xml:"connection"`
			URL        string `xml:"url"`
		} `xml:"scm"`
	}
	if err := xml.Unmarshal(raw, &pom); err != nil {
		t.Fatal(err)
	}
	if pom.Description == "" || pom.URL == "" || len(pom.Licenses) == 0 || pom.Licenses[0].Name == "" || pom.Licenses[0].URL == "" ||
		len(pom.Developers) == 0 || pom.SCM.Connection == "" || pom.SCM.URL == "" {
		t.Errorf("the POM lacks what a public repository requires: %+v", pom)
	}
}

func hasSuffix(files map[string]string, suffix string) bool {
	for name := range files {
		if name == suffix || strings.HasSuffix(name, "/"+suffix) {
			return true
		}
	}
	return false
}
