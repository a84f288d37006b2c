package kip1289

import "sort"

// Batches turns offset → acknowledge type into acknowledgement batches:
// sorted, contiguous offsets make one batch; a batch has one type when all
// its offsets' types are equal, else one type per offset. Nil for an empty
// map.
func Batches(m map[int64]int8) []TxnShareAcknowledgeBatch {
	if len(m) == 0 {
		return nil
	}
	offs := make([]int64, 0, len(m))
	for o := range m {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	var out []TxnShareAcknowledgeBatch
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && offs[j] == offs[j-1]+1 {
			j++
		}
		run := offs[i:j]
		types := make([]int8, len(run))
		same := true
		for k, o := range run {
			types[k] = m[o]
			if types[k] != types[0] {
				same = false
			}
		}
		if same {
			types = types[:1]
		}
		out = append(out, TxnShareAcknowledgeBatch{FirstOffset: run[0], LastOffset: run[len(run)-1], AcknowledgeTypes: types})
		i = j
	}
	return out
}
