package upstream

import (
	"strings"
	"testing"
)

// TestEmbeddedDataDirInUse: a second embedded cluster on a data dir in use
// is refused with an error naming the key (two would persist over each
// other's state); once the first is closed, the dir is free again.
func TestEmbeddedDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := StartEmbedded(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := StartEmbedded(dir, 1)
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second embedded cluster started on a data dir in use")
	}
	if !strings.Contains(err.Error(), "embedded.data_dir") || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error does not say what to do: %v", err)
	}
	first.Close()
	again, err := StartEmbedded(dir, 1)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}
