package staging

import (
	"fmt"
	"math/rand"
	"testing"
)

// TestKnownListAsAScan: the sorted list answers what the scan of every
// range in learning order answered, through random adds, removals (and the
// compactions they cause) and queries, overlapping and wide ranges
// included.
func TestKnownListAsAScan(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 200; round++ {
		kl := &knownList{}
		var all []*knownRange // learning order
		var seq uint64
		for step := 0; step < 200; step++ {
			switch live := kl.live(); {
			case rng.Intn(3) > 0 || live == 0:
				f := rng.Int63n(500)
				w := rng.Int63n(10)
				if rng.Intn(20) == 0 {
					w = rng.Int63n(300)
				}
				seq++
				r := &knownRange{first: f, last: f + w, seq: seq}
				kl.add(r)
				all = append(all, r)
			default:
				r := all[rng.Intn(len(all))]
				kl.remove(r)
				kl.remove(r) // twice changes nothing
			}
			n := 0
			for _, r := range all {
				if !r.dead {
					n++
				}
			}
			if kl.live() != n {
				t.Fatalf("round %d step %d: live %d, want %d", round, step, kl.live(), n)
			}
			a := rng.Int63n(520)
			b := a + rng.Int63n(20)
			var wantAt *knownRange
			wantOverlaps := false
			for _, r := range all {
				if r.dead {
					continue
				}
				if wantAt == nil && a >= r.first && a <= r.last {
					wantAt = r
				}
				if r.first <= b && r.last >= a {
					wantOverlaps = true
				}
			}
			if got := kl.at(a); got != wantAt {
				t.Fatalf("round %d step %d: at(%d) = %+v, want %+v", round, step, a, got, wantAt)
			}
			if got := kl.overlaps(a, b); got != wantOverlaps {
				t.Fatalf("round %d step %d: overlaps(%d, %d) = %v, want %v", round, step, a, b, got, wantOverlaps)
			}
		}
	}
	var nilList *knownList
	if nilList.live() != 0 || nilList.at(3) != nil || nilList.overlaps(0, 9) {
		t.Fatal("a nil list is not empty")
	}
}

// knownLedger is a ledger that learned n committed shadow records of
// another sidecar, 100 offsets each, in one share partition of group g: what
// a sidecar of a large fleet keeps between two prunes (design.md §8.5).
func knownLedger(n int) *Ledger {
	l := testEngine()
	for i := 0; i < n; i++ {
		loc := Loc{0, int64(i)}
		l.Learn(loc, &ShadowRecord{ProxyID: "another", GroupID: "g", TransactionalID: "t",
			Topics: []ShadowTopic{{TopicID: [16]byte{1}, Partitions: []ShadowPartition{{Partition: 0,
				AcknowledgementBatches: []ShadowBatch{{FirstOffset: int64(100 * i), LastOffset: int64(100*i + 99), AcknowledgeTypes: []int8{1}}}}}}}})
		l.ResolveKnown(loc, true)
	}
	return l
}

// BenchmarkScreenFirstDelivery: screening a fetch response of 500 records
// past everything known, the common case, against n known ranges.
func BenchmarkScreenFirstDelivery(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := knownLedger(n)
			f := Fetcher{Group: "g", Member: "m"}
			first := int64(100 * n)
			for b.Loop() {
				if sc := l.Screen(f, [16]byte{1}, 0, acq(first, first+499), 0); sc.Changed {
					b.Fatal("screened a first delivery past every known range")
				}
			}
		})
	}
}

// BenchmarkForgetKnown: forgetting every known record one by one (each
// applied, or aborted), per record, with n known.
func BenchmarkForgetKnown(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				l := knownLedger(n)
				b.StartTimer()
				for i := 0; i < n; i++ {
					l.ForgetApplied(Loc{0, int64(i)})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

// BenchmarkForgetBelow: one prune tick dropping half of n known records.
func BenchmarkForgetBelow(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			starts := map[string]map[[16]byte]map[int32]int64{"g": {[16]byte{1}: {0: int64(100 * n / 2)}}}
			for b.Loop() {
				b.StopTimer()
				l := knownLedger(n)
				b.StartTimer()
				l.ForgetBelow(starts)
				if got := l.KnownRanges(); got != n-n/2 {
					b.Fatalf("%d known after ForgetBelow, want %d", got, n-n/2)
				}
			}
		})
	}
}
