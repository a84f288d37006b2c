package main

// Reading the output and asking the share group what is left, through
// sharetx (the reading itself: e2e/sim).

import (
	"time"

	"github.com/sharetx/sharetx/e2e/sim"
)

// verifier is the demo's own checking clients' view of sharetx.
func verifier(bootstrap string) sim.Cluster {
	return sim.Cluster{Seeds: []string{bootstrap}, ClientID: "demo-verifier"}
}

// leftover joins the share group with a fresh member through sharetx and
// polls for quiet: it returns how many records it was handed (records the
// group never acknowledged) and then the group's lag on the topic (records
// neither acknowledged nor archived, including any still locked by someone;
// -1 if unknown). It never accepts: what it gets it releases, and leaves.
func leftover(bootstrap, group, topic string, quiet time.Duration) (int, int64, error) {
	got, lag, err := verifier(bootstrap).Unacked(group, topic, quiet, 0)
	return len(got), lag, err
}
