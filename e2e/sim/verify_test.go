package sim

import (
	"reflect"
	"testing"
)

func ids(s ...string) []string { return s }

func TestCount(t *testing.T) {
	in := ids("a", "b", "c", "d")
	for _, tc := range []struct {
		name string
		out  map[string]int
		want Counts
	}{
		{"exactly once", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1},
			Counts{In: 4, Out: 4, Distinct: 4}},
		{"nothing", map[string]int{},
			Counts{In: 4, Lost: 4, LostIDs: ids("a", "b", "c", "d")}},
		{"nil output", nil,
			Counts{In: 4, Lost: 4, LostIDs: ids("a", "b", "c", "d")}},
		{"duplicates count records beyond the first", map[string]int{"a": 3, "b": 1, "c": 2, "d": 1},
			Counts{In: 4, Out: 7, Distinct: 4, Duplicates: 3, DuplicateIDs: ids("a", "c")}},
		{"lost and duplicated together", map[string]int{"a": 2, "c": 1},
			Counts{In: 4, Out: 3, Distinct: 2, Duplicates: 1, Lost: 2, DuplicateIDs: ids("a"), LostIDs: ids("b", "d")}},
		{"unexpected values are counted, not mistaken for inputs", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "zz": 2},
			Counts{In: 4, Out: 6, Distinct: 4, Unexpected: 2}},
		{"zero entries are no records", map[string]int{"a": 1, "b": 1, "c": 1, "d": 0, "x": 0},
			Counts{In: 4, Out: 3, Distinct: 3, Lost: 1, LostIDs: ids("d")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Count(in, tc.out)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Count = %+v\nwant    %+v", got, tc.want)
			}
			if got.Out != got.Distinct+got.Duplicates+got.Unexpected {
				t.Fatalf("out %d != distinct %d + duplicates %d + unexpected %d", got.Out, got.Distinct, got.Duplicates, got.Unexpected)
			}
			if got.Distinct+got.Lost != got.In {
				t.Fatalf("distinct %d + lost %d != in %d", got.Distinct, got.Lost, got.In)
			}
		})
	}
}

func TestCountRepeatedInputIDs(t *testing.T) {
	// An id listed twice among the inputs is one input.
	got := Count(ids("a", "a", "b"), map[string]int{"a": 1, "b": 1})
	if got.Lost != 0 || got.Duplicates != 0 || got.Distinct != 2 {
		t.Fatalf("%+v", got)
	}
}
