package kip1289

import (
	"strings"
	"testing"
)

// TestPartitionValuesUnchanged pins the hash: the proxy and every client
// deployed compute it, so a change would split them.
func TestPartitionValuesUnchanged(t *testing.T) {
	// FNV-1a 32 of "" is 0x811c9dc5 = 2166136261; of "a" is 0xe40c292c.
	if got := ShadowPartition("", 1000); got != 2166136261%1000 {
		t.Fatalf("empty: %d", got)
	}
	if got := ShadowPartition("a", 1000); got != int32(uint32(0xe40c292c)%1000) {
		t.Fatalf("a: %d", got)
	}
	for _, tc := range []struct {
		id            string
		n             int32
		shadow, touch int32
	}{
		{"", 3, 1, 2},
		{"orders-worker-1", 8, 7, 0},
		{"txn-a", 2, 1, 0},
		{"txn-a", 5, 3, 4},
		{"txn-a", 1, 0, 0},
		{"txn-a", 0, 0, 0},
		{"txn-a", -1, 0, 0},
	} {
		if s, touch := ShadowPartition(tc.id, tc.n), TouchPartition(tc.id, tc.n); s != tc.shadow || touch != tc.touch {
			t.Errorf("%q/%d: shadow %d touch %d, want %d %d", tc.id, tc.n, s, touch, tc.shadow, tc.touch)
		}
	}
}

func TestTouchPartitionNeverShadow(t *testing.T) {
	for i := 0; i < 200; i++ {
		id := strings.Repeat("x", i)
		for n := int32(1); n < 20; n++ {
			s, touch := ShadowPartition(id, n), TouchPartition(id, n)
			if s < 0 || s >= n || touch < 0 || touch >= n {
				t.Fatalf("%q/%d out of range: %d %d", id, n, s, touch)
			}
			if n > 1 && s == touch {
				t.Fatalf("%q/%d touch == shadow", id, n)
			}
		}
	}
}
