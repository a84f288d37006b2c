package sim

import "sort"

// Counts is the verdict on an output topic: every input id must appear
// exactly once among the committed output records.
type Counts struct {
	In         int `json:"in"`         // inputs produced
	Out        int `json:"out"`        // committed output records, in total
	Distinct   int `json:"distinct"`   // distinct input ids among them
	Duplicates int `json:"duplicates"` // output records beyond the first of each id
	Lost       int `json:"lost"`       // input ids with no output record
	Unexpected int `json:"unexpected"` // output records whose value is no input id

	DuplicateIDs []string `json:"duplicate_ids,omitempty"` // sorted
	LostIDs      []string `json:"lost_ids,omitempty"`      // sorted
}

// Count compares the input ids with the values of the committed output
// records (outputs[id] = how many output records carry id). An id listed
// twice among the inputs is one input; entries of outputs that are not
// positive are no records.
func Count(inputs []string, outputs map[string]int) Counts {
	c := Counts{In: len(inputs)}
	known := make(map[string]bool, len(inputs))
	for _, id := range inputs {
		known[id] = true
	}
	for v, n := range outputs {
		if n <= 0 {
			continue
		}
		c.Out += n
		if !known[v] {
			c.Unexpected += n
		}
	}
	for id := range known {
		switch n := outputs[id]; {
		case n <= 0:
			c.Lost++
			c.LostIDs = append(c.LostIDs, id)
		default:
			c.Distinct++
			if n > 1 {
				c.Duplicates += n - 1
				c.DuplicateIDs = append(c.DuplicateIDs, id)
			}
		}
	}
	sort.Strings(c.LostIDs)
	sort.Strings(c.DuplicateIDs)
	return c
}
