package kip1289

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

func TestBatches(t *testing.T) {
	A, R := Accept, Reject
	for _, tc := range []struct {
		name string
		m    map[int64]int8
		want []TxnShareAcknowledgeBatch
	}{
		{"empty", map[int64]int8{}, nil},
		{"nil", nil, nil},
		{"one", map[int64]int8{7: A}, []TxnShareAcknowledgeBatch{{7, 7, []int8{A}}}},
		{"contiguous one type", map[int64]int8{12: A, 10: A, 11: A, 13: A}, []TxnShareAcknowledgeBatch{{10, 13, []int8{A}}}},
		{"gaps", map[int64]int8{5: R, 1: R, 2: R, 9: R, 7: R, 8: R},
			[]TxnShareAcknowledgeBatch{{1, 2, []int8{R}}, {5, 5, []int8{R}}, {7, 9, []int8{R}}}},
		{"mixed types", map[int64]int8{3: A, 4: R, 5: A, 7: R, 8: R},
			[]TxnShareAcknowledgeBatch{{3, 5, []int8{A, R, A}}, {7, 8, []int8{R}}}},
		{"gap type is a type", map[int64]int8{0: Gap, 1: A}, []TxnShareAcknowledgeBatch{{0, 1, []int8{Gap, A}}}},
		{"extremes", map[int64]int8{math.MaxInt64: A, math.MaxInt64 - 1: A, math.MinInt64: R},
			[]TxnShareAcknowledgeBatch{{math.MinInt64, math.MinInt64, []int8{R}}, {math.MaxInt64 - 1, math.MaxInt64, []int8{A}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Batches(tc.m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// checkBatches checks the properties of Batches(m): the batches cover
// exactly m's offsets with their types, in increasing order, each batch is
// a maximal contiguous run (the next batch does not start right after it),
// and a batch has one type exactly when all its offsets share it.
func checkBatches(t *testing.T, m map[int64]int8) {
	t.Helper()
	bs := Batches(m)
	if len(m) == 0 {
		if bs != nil {
			t.Fatalf("empty map: %+v, want nil", bs)
		}
		return
	}
	seen := 0
	for i, b := range bs {
		if b.FirstOffset > b.LastOffset {
			t.Fatalf("batch %d: first %d > last %d", i, b.FirstOffset, b.LastOffset)
		}
		if i > 0 && bs[i-1].LastOffset >= b.FirstOffset-1 {
			t.Fatalf("batch %d starts at %d, right after or inside the previous one (last %d)", i, b.FirstOffset, bs[i-1].LastOffset)
		}
		n := uint64(b.LastOffset - b.FirstOffset + 1)
		same := true
		for o := b.FirstOffset; ; o++ {
			ty, ok := m[o]
			if !ok {
				t.Fatalf("batch %d covers offset %d, which is not acknowledged", i, o)
			}
			if ty != m[b.FirstOffset] {
				same = false
			}
			want := b.AcknowledgeTypes[0]
			if len(b.AcknowledgeTypes) > 1 {
				want = b.AcknowledgeTypes[o-b.FirstOffset]
			}
			if ty != want {
				t.Fatalf("offset %d: type %d in the batch, %d acknowledged", o, want, ty)
			}
			seen++
			if o == b.LastOffset {
				break
			}
		}
		switch {
		case same && len(b.AcknowledgeTypes) != 1:
			t.Fatalf("batch %d: %d types for a run of one type", i, len(b.AcknowledgeTypes))
		case !same && uint64(len(b.AcknowledgeTypes)) != n:
			t.Fatalf("batch %d: %d types for %d offsets of mixed types", i, len(b.AcknowledgeTypes), n)
		}
	}
	if seen != len(m) {
		t.Fatalf("the batches cover %d offsets, %d acknowledged", seen, len(m))
	}
}

// FuzzBatches reads the input as (offset delta, type) pairs: small deltas
// make runs, larger ones gaps.
func FuzzBatches(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 1, 3, 5, 1})
	f.Add([]byte{0, 3, 0, 3, 200, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := map[int64]int8{}
		var o int64
		for len(data) >= 2 {
			d := int64(data[0])
			if d > 250 { // now and then a jump across the int64 range
				o = math.MaxInt64 - int64(binary.BigEndian.Uint16([]byte{data[0], data[1]}))
			} else if d > 3 {
				o += d - 3 // runs need deltas of 1
			} else {
				o += d // 0: the same offset again, its type replaced
			}
			m[o] = int8(data[1] % 5)
			data = data[2:]
		}
		checkBatches(t, m)
	})
}

func TestBatchesProperties(t *testing.T) {
	// Every map over offsets 0..9 with at most two types (1023 maps), so
	// each shape of runs and gaps, uniform or mixed, is seen.
	for mask := 1; mask < 1<<10; mask++ {
		for _, mixed := range []bool{false, true} {
			m := map[int64]int8{}
			for o := int64(0); o < 10; o++ {
				if mask&(1<<o) != 0 {
					ty := Accept
					if mixed && o%3 == 0 {
						ty = Reject
					}
					m[o] = ty
				}
			}
			checkBatches(t, m)
		}
	}
}
