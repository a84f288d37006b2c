package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
)

// pipelineResult is one consume-transform-produce run through the proxy.
type pipelineResult struct {
	// alo: non-transactional producer, explicit ACCEPTs after the produce;
	// kafka-txn: the same with a transactional producer (commit, then
	// explicit ACCEPTs: at-least-once, the cost of Kafka transactions alone);
	// kafka-txn-direct: kafka-txn straight to the broker, not through the proxy;
	// txn: the ACCEPTs bound to the transaction (TxnShareAcknowledge).
	Mode         string  `json:"mode"`
	Batch        int     `json:"batch"`
	Records      int64   `json:"records"`
	Transactions int64   `json:"transactions"` // polls processed (one transaction each in txn mode)
	AvgBatch     float64 `json:"avg_records_per_transaction"`
	Seconds      float64 `json:"seconds"`
	RecordsSec   float64 `json:"records_per_s"`
	Aborts       int64   `json:"aborts"`
	// txn mode: SendShareAcknowledgementsToTransaction call durations
	TxnAckP50Ms float64 `json:"txn_share_ack_p50_ms,omitempty"`
	TxnAckP99Ms float64 `json:"txn_share_ack_p99_ms,omitempty"`
	// txn mode: commit→applied from the proxy's histogram (bucket deltas)
	CommitAppliedP50Ms float64 `json:"commit_to_applied_p50_ms,omitempty"`
	CommitAppliedP99Ms float64 `json:"commit_to_applied_p99_ms,omitempty"`
	CommitAppliedN     float64 `json:"commit_to_applied_count,omitempty"`

	// p50 of each stage of a loop iteration
	// transactional modes: from the first Produce of the outputs to the
	// end of Flush (in txn mode the TxnShareAcknowledge overlaps it)
	ProduceP50Ms float64 `json:"produce_p50_ms"`
	ProduceP99Ms float64 `json:"produce_p99_ms"`
	EndTxnP50Ms  float64 `json:"end_txn_p50_ms,omitempty"`

	ackLat, produceLat, endLat []float64
}

type pipelineOpts struct {
	bs, in, out, group string
	txn                bool
	kafkaTxnOnly       bool // a transactional producer, acknowledgements outside the transaction
	// sequential (txn-seq): wait for the outputs, then send the acks (the
	// acks cannot overlap the produce; the transaction already produced,
	// so there is no touch record either)
	sequential bool
	batch      int
	target     int64         // stop after this many records
	maxDur     time.Duration // or after this long
	// defaults: kgo's default share consumer settings (no ShareMaxRecords,
	// no FetchMaxWait); otherwise ShareMaxRecords is raised to batch when
	// batch exceeds kgo's default of 500.
	defaults bool
	// stop, if set, ends the run when it returns true (checked per poll).
	stop func() bool
}

// runPipeline is the consume-transform-produce loop of e2e/kip1289_test.go:
// poll up to batch records, produce one output record per input (the same
// value), then either bind the ACCEPTs to the transaction and commit (txn),
// or ACCEPT them explicitly after the produce succeeded (alo: sent with the
// next ShareFetch; a non-transactional idempotent producer).
func runPipeline(ctx context.Context, o pipelineOpts) (*pipelineResult, error) {
	res := &pipelineResult{Mode: "alo", Batch: o.batch}
	if o.txn {
		res.Mode = "txn"
	} else if o.kafkaTxnOnly {
		res.Mode = "kafka-txn"
	}
	transactional := o.txn || o.kafkaTxnOnly
	copts := []kgo.Opt{kgo.ShareGroup(o.group), kgo.ConsumeTopics(o.in)}
	if !o.defaults && o.batch > 500 {
		copts = append(copts, kgo.ShareMaxRecords(int32(o.batch)))
	}
	consumer, err := newClient(o.bs, copts...)
	if err != nil {
		return nil, err
	}
	defer closeWithin(consumer, 15*time.Second)
	popts := []kgo.Opt{kgo.DefaultProduceTopic(o.out), kgo.MetadataMinAge(250 * time.Millisecond)}
	// Both transactional modes run a client.Producer, so that they differ
	// only in binding the acknowledgements.
	var txnProducer *client.Producer
	var producer *kgo.Client
	if transactional {
		popts = append(popts, kgo.TransactionalID(fmt.Sprintf("bench-%s-%d-%d", o.group, o.batch, time.Now().UnixNano())))
		txnProducer, err = client.NewProducer(clientOpts(o.bs, popts...))
		if err == nil {
			producer = txnProducer.Client()
		}
	} else {
		producer, err = newClient(o.bs, popts...)
	}
	if err != nil {
		return nil, err
	}
	defer closeWithin(producer, 15*time.Second)
	if transactional {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err := producer.ProducerID(ictx) // InitProducerId now, not on the first produce
		cancel()
		if err != nil {
			return nil, fmt.Errorf("InitProducerId: %w", err)
		}
	}
	md := client.NewShareGroupMetadata(o.group)
	var t0 time.Time
	deadline := time.Now().Add(o.maxDur + 30*time.Second) // the join may take a while
	failedInARow := 0
	for res.Records < o.target {
		if o.stop != nil && o.stop() {
			break
		}
		if !t0.IsZero() && time.Since(t0) > o.maxDur {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s batch %d: %d records in %s", res.Mode, o.batch, res.Records, o.maxDur)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := consumer.PollRecords(pctx, o.batch)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("poll: %w", ferr)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if t0.IsZero() {
			t0 = time.Now()
		}
		outs := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			outs[i] = &kgo.Record{Key: r.Key, Value: r.Value}
		}
		if !transactional {
			t := time.Now()
			if err := producer.ProduceSync(ctx, outs...).FirstErr(); err != nil {
				return nil, fmt.Errorf("produce: %w", err)
			}
			res.produceLat = append(res.produceLat, time.Since(t).Seconds())
			for _, r := range recs {
				r.Ack(kgo.AckAccept)
			}
			res.Records += int64(len(recs))
			res.Transactions++
			continue
		}
		if err := txnOnce(ctx, txnProducer, recs, outs, md, o.txn, o.sequential, res); err != nil {
			res.Aborts++
			failedInARow++
			if failedInARow >= 5 {
				return nil, fmt.Errorf("5 transactions in a row failed, the last: %w", err)
			}
			continue
		}
		failedInARow = 0
		res.Records += int64(len(recs))
		res.Transactions++
	}
	d := time.Since(t0)
	if t0.IsZero() {
		return nil, fmt.Errorf("%s batch %d: no records", res.Mode, o.batch)
	}
	res.Seconds = d.Seconds()
	res.RecordsSec = float64(res.Records) / d.Seconds()
	if res.Transactions > 0 {
		res.AvgBatch = float64(res.Records) / float64(res.Transactions)
	}
	res.ProduceP50Ms = sampleQuantile(0.5, res.produceLat) * 1000
	res.ProduceP99Ms = sampleQuantile(0.99, res.produceLat) * 1000
	if transactional {
		res.EndTxnP50Ms = sampleQuantile(0.5, res.endLat) * 1000
	}
	if o.txn {
		res.TxnAckP50Ms = sampleQuantile(0.5, res.ackLat) * 1000
		res.TxnAckP99Ms = sampleQuantile(0.99, res.ackLat) * 1000
	}
	return res, nil
}

// txnOnce runs one transaction; on any failure it aborts and releases the
// records for redelivery (client.ReleaseForRedelivery). With bindAcks the
// ACCEPTs are bound to the transaction; without, they are sent explicitly
// after the commit.
func txnOnce(ctx context.Context, producer *client.Producer, recs, outs []*kgo.Record, md client.ShareGroupMetadata, bindAcks, sequential bool, res *pipelineResult) error {
	if err := producer.BeginTransaction(); err != nil {
		client.ReleaseForRedelivery(recs...)
		return fmt.Errorf("begin: %w", err)
	}
	acks := client.NewShareAcknowledgements()
	for _, r := range recs {
		acks.Add(r, client.Accept)
	}
	// The outputs are produced asynchronously and, with bindAcks, the
	// acknowledgements are sent while they are in flight (the order the
	// client package documents: no touch record, and the proxy's shadow
	// write overlaps the produce); then Flush waits for the outputs. With
	// sequential, Flush comes first.
	t := time.Now()
	var perr error
	var mu sync.Mutex
	for _, r := range outs {
		producer.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if perr == nil {
					perr = err
				}
				mu.Unlock()
			}
		})
	}
	outputs := func() error { // waits for the outputs and times them
		err := producer.Flush(ctx)
		mu.Lock()
		if perr != nil && err == nil {
			err = perr
		}
		mu.Unlock()
		if err == nil {
			res.produceLat = append(res.produceLat, time.Since(t).Seconds())
		}
		return err
	}
	var err error
	if sequential {
		err = outputs()
	}
	if bindAcks && err == nil {
		ta := time.Now()
		err = producer.SendShareAcknowledgementsToTransaction(ctx, acks, md)
		if err == nil {
			res.ackLat = append(res.ackLat, time.Since(ta).Seconds())
		}
	}
	if !sequential {
		if ferr := outputs(); err == nil {
			err = ferr
		}
	}
	if err == nil {
		t := time.Now()
		err = producer.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			res.endLat = append(res.endLat, time.Since(t).Seconds())
			if !bindAcks {
				for _, r := range recs {
					r.Ack(kgo.AckAccept)
				}
			}
			return nil
		}
	}
	if aerr := producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		err = errors.Join(err, fmt.Errorf("abort: %w", aerr))
	}
	client.ReleaseForRedelivery(recs...)
	return err
}
