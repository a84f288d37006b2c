package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/e2e/sim"
)

// orchestrator is the real cluster (not through a proxy), for the
// orchestrator's own clients.
func orchestrator(seeds []string) sim.Cluster {
	return sim.Cluster{Seeds: seeds, ClientID: "chaos-orchestrator"}
}

// direct is a client of the real cluster (not through a proxy).
func direct(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return orchestrator(seeds).Client(opts...)
}

// brokerIDs returns the node ids of the cluster's brokers.
func brokerIDs(ctx context.Context, adm *kadm.Client) ([]int32, error) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range md.Brokers {
		ids = append(ids, b.NodeID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// poKey is an input record's partition and offset.
type poKey = sim.PO

// seedInputs produces n records with unique ids as values, in small
// batches spread over the partitions (a share fetch acquires whole batches:
// small ones spread the work over the workers); when cl is transactional,
// each batch in a committed transaction of its own. It returns the ids and
// where each landed.
func seedInputs(ctx context.Context, cl *kgo.Client, topic, prefix string, n int) ([]string, map[poKey]string, error) {
	ids := make([]string, n)
	where := make(map[poKey]string, n)
	const chunk = 24
	for start := 0; start < n; start += chunk {
		var recs []*kgo.Record
		for i := start; i < min(n, start+chunk); i++ {
			ids[i] = fmt.Sprintf("%s-%06d", prefix, i)
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(ids[i])})
		}
		txn := cl.OptValue(kgo.TransactionalID) != ""
		if txn {
			if err := cl.BeginTransaction(); err != nil {
				return nil, nil, fmt.Errorf("seed %s: %w", topic, err)
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return nil, nil, fmt.Errorf("seed %s: %w", topic, err)
		}
		if txn {
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return nil, nil, fmt.Errorf("seed %s: commit: %w", topic, err)
			}
		}
		for _, r := range recs {
			where[poKey{Partition: r.Partition, Offset: r.Offset}] = string(r.Value)
		}
	}
	return ids, where, nil
}
