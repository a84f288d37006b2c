package client

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/kip1289"
)

const (
	shadowCacheTTL   = time.Minute
	shadowWaitMax    = 10 * time.Second
	shadowWaitBackof = 200 * time.Millisecond
)

// shadowPartitions returns the partition count of the shadow topic, waiting
// briefly for the proxy to create it.
func (p *Producer) shadowPartitions(ctx context.Context) (int32, error) {
	topic := p.shadowTopic
	p.mu.Lock()
	n, at := p.shadowN, p.shadowAt
	p.mu.Unlock()
	if n > 0 && time.Since(at) < shadowCacheTTL {
		return n, nil
	}
	deadline := time.Now().Add(shadowWaitMax)
	for {
		resp, err := requestMetadata(ctx, p.cl, []string{topic})
		if err != nil {
			return 0, err
		}
		var lastErr error = fmt.Errorf("sharetx: shadow topic %q is missing from metadata", topic)
		for _, t := range resp.Topics {
			if t.Topic == nil || *t.Topic != topic {
				continue
			}
			if t.ErrorCode != 0 {
				lastErr = fmt.Errorf("sharetx: shadow topic %q: %w", topic, kerr.ErrorForCode(t.ErrorCode))
				break
			}
			if len(t.Partitions) == 0 {
				break
			}
			n := int32(len(t.Partitions))
			p.mu.Lock()
			p.shadowN, p.shadowAt = n, time.Now()
			p.mu.Unlock()
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, lastErr
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%w)", lastErr, ctx.Err())
		case <-time.After(shadowWaitBackof):
		}
	}
}

// ensureTouched makes sure the producer's current transaction contains a
// record, so that kgo's EndTransaction really sends EndTxn (kgo skips EndTxn
// when nothing was produced). Under transaction version 2 a transaction that
// already produced a record successfully needs nothing more; otherwise it
// produces one touch record per transaction. It returns the producer id and
// epoch to stage the acknowledgements with.
func (p *Producer) ensureTouched(ctx context.Context) (int64, int16, error) {
	p.touchMu.Lock()
	defer p.touchMu.Unlock()

	pid, epoch, err := p.cl.ProducerID(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("sharetx: producer id: %w", err)
	}
	p.mu.Lock()
	tv2 := p.tv2
	p.mu.Unlock()
	// A record produced in this transaction (the touch record included), or
	// records buffered or in flight now: those belong to this transaction
	// (kgo refuses produces outside one, and EndTransaction must follow a
	// Flush); once one succeeds kgo sends EndTxn; if all fail, kgo aborts
	// (TV2), and the staged acks with it.
	done := tv2 && (p.producedIn(pid, epoch) || p.cl.BufferedProduceRecords() > 0)
	if done {
		return pid, epoch, nil
	}

	n, err := p.shadowPartitions(ctx)
	if err != nil {
		return 0, 0, err
	}
	if n < 2 {
		return 0, 0, fmt.Errorf("sharetx: shadow topic %q has %d partition(s); it needs at least 2 so the touch record never shares a partition with the proxy's shadow records", p.shadowTopic, n)
	}
	// The touch record: on kip1289.TouchPartition, never the partition the
	// proxy writes its own shadow records for the transactional id to (the
	// two would share producer sequence numbers), one record with the touch
	// header. The proxy relays exactly that and refuses anything else
	// written to the shadow topic.
	part := kip1289.TouchPartition(p.txnID, n)
	r := &kgo.Record{
		Topic:     p.shadowTopic,
		Partition: part,
		Value:     []byte(kip1289.TouchValue),
		Headers:   []kgo.RecordHeader{{Key: kip1289.TouchHeader, Value: []byte(kip1289.TouchHeaderValue)}},
	}
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return 0, 0, fmt.Errorf("sharetx: producing the transaction's touch record to %s[%d] (is the producer in a transaction?): %w", p.shadowTopic, part, err)
	}
	if r.Partition != part {
		return 0, 0, fmt.Errorf("sharetx: the touch record landed on %s[%d] instead of partition %d: the client's partitioner was replaced", p.shadowTopic, r.Partition, part)
	}
	// The produce hook noted the touch: later calls of this transaction
	// find producedIn(pid, epoch).
	if pid, epoch, err = p.cl.ProducerID(ctx); err != nil {
		return 0, 0, fmt.Errorf("sharetx: producer id: %w", err)
	}
	return pid, epoch, nil
}
