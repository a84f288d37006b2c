package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy-1.log")
	var b strings.Builder
	for i := range 30 {
		if i%2 == 0 {
			b.WriteString("   1.000 ! level=INFO msg=fine\n")
			continue
		}
		b.WriteString("   1.000 ! level=WARN msg=w" + string(rune('a'+i/2)) + "\n")
	}
	b.WriteString("   2.000 ! level=ERROR " + strings.Repeat("x", 1000) + "\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := logTail(path, 3, proxyTrouble)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3: %q", len(got), got)
	}
	if !strings.HasSuffix(got[0], "msg=wn") || !strings.HasSuffix(got[1], "msg=wo") {
		t.Errorf("not the last warnings in order: %q", got[:2])
	}
	if !strings.HasPrefix(got[2], "   2.000 ! level=ERROR xxx") || len(got[2]) != 400+len("…") {
		t.Errorf("long line not cut to 400 bytes: %d bytes", len(got[2]))
	}
	if logTail(filepath.Join(t.TempDir(), "absent.log"), 3, proxyTrouble) != nil {
		t.Error("a missing log gave lines")
	}
}
