package kip1289

import "slices"

// Batches turns one partition's acknowledgements (offset → acknowledge type)
// into acknowledgement batches: the offsets sorted, each run of contiguous
// offsets one batch, with one type for the run when all its offsets have
// the same type and one type per offset otherwise. An empty map gives nil.
func Batches(m map[int64]int8) []TxnShareAcknowledgeBatch {
	if len(m) == 0 {
		return nil
	}
	offsets := make([]int64, 0, len(m))
	for o := range m {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)

	var out []TxnShareAcknowledgeBatch
	for i := 0; i < len(offsets); {
		j := i + 1
		for j < len(offsets) && offsets[j] == offsets[j-1]+1 {
			j++
		}
		run := offsets[i:j]
		types := make([]int8, len(run))
		same := true
		for k, o := range run {
			types[k] = m[o]
			if types[k] != types[0] {
				same = false
			}
		}
		if same {
			types = types[:1:1]
		}
		out = append(out, TxnShareAcknowledgeBatch{FirstOffset: run[0], LastOffset: run[len(run)-1], AcknowledgeTypes: types})
		i = j
	}
	return out
}
