package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/kip1289"
)

// The pipeline modes. Every one is the same consume-transform-produce loop
// (one output per input, the input's value under the key "partition:offset"),
// differing in how the inputs are acknowledged and the outputs produced.
const (
	// alo: share group, non-transactional idempotent producer, explicit
	// ACCEPTs after the produce (sent with the next ShareFetch).
	modeALO = "alo"
	// kafka-txn: share group, a transactional producer, explicit ACCEPTs
	// after the commit: at-least-once, the cost of Kafka transactions
	// alone. kafka-txn-direct is the same straight to the broker.
	modeKafkaTxn       = "kafka-txn"
	modeKafkaTxnDirect = "kafka-txn-direct"
	// txn: share-group exactly-once through sharetx: the ACCEPTs bound to
	// the transaction (TxnShareAcknowledge), sent while the outputs are in
	// flight. txn-seq: the same, sent once the outputs were acknowledged.
	modeTxn    = "txn"
	modeTxnSeq = "txn-seq"
	// group-eos: consumer-group exactly-once, direct to the broker: a
	// classic consumer group, a transactional producer and the offsets
	// committed in the transaction (franz-go's GroupTransactSession, the
	// equivalent of Java's sendOffsetsToTransaction).
	modeGroupEOS = "group-eos"
)

// exactlyOnce reports whether mode promises exactly-once, so that its
// outputs are checked per input id after every run.
func exactlyOnce(mode string) bool {
	switch mode {
	case modeTxn, modeTxnSeq, modeGroupEOS, modeJavaShareEOS, modeJavaGroupEOS, modePyShareEOS, modePyGroupEOS:
		return true
	}
	return false
}

// pipelineResult is one consume-transform-produce run.
type pipelineResult struct {
	Mode       string  `json:"mode"`
	Batch      int     `json:"batch"`
	Workers    int     `json:"workers"`
	Partitions int     `json:"partitions"`
	ProcMs     float64 `json:"processing_ms_per_record,omitempty"`
	Round      int     `json:"round"`
	// Language: "go" (franz-go), "java" (kafka-clients) or "python" (confluent-kafka).
	Language     string  `json:"language"`
	Records      int64   `json:"records"`      // inputs in committed transactions (or acknowledged, in alo)
	Transactions int64   `json:"transactions"` // polls processed (one transaction each in transactional modes)
	AvgBatch     float64 `json:"avg_records_per_transaction"`
	Seconds      float64 `json:"seconds"`
	RecordsSec   float64 `json:"records_per_s"`
	Aborts       int64   `json:"aborts"`
	// The exactly-once check (exactly-once modes): the run's output topic
	// read read_committed, counted per input id.
	Verified   bool  `json:"verified"`
	Outputs    int64 `json:"outputs,omitempty"`
	Duplicates int64 `json:"duplicates,omitempty"`
	Lost       int64 `json:"lost,omitempty"`
	// txn mode: SendShareAcknowledgementsToTransaction call durations
	TxnAckP50Ms float64 `json:"txn_share_ack_p50_ms,omitempty"`
	TxnAckP99Ms float64 `json:"txn_share_ack_p99_ms,omitempty"`
	// txn mode: commit→applied from the proxy's histogram (bucket deltas)
	CommitAppliedP50Ms float64 `json:"commit_to_applied_p50_ms,omitempty"`
	CommitAppliedP99Ms float64 `json:"commit_to_applied_p99_ms,omitempty"`
	CommitAppliedN     float64 `json:"commit_to_applied_count,omitempty"`

	// p50 of each stage of a loop iteration
	// transactional modes: from the first Produce of the outputs to the
	// end of Flush (in txn mode the TxnShareAcknowledge overlaps it);
	// group-eos: the whole End (flush, offsets, EndTxn) is EndTxn.
	ProduceP50Ms float64 `json:"produce_p50_ms"`
	ProduceP99Ms float64 `json:"produce_p99_ms"`
	EndTxnP50Ms  float64 `json:"end_txn_p50_ms,omitempty"`

	// Budget is where a transaction's time went (budget.go).
	Budget map[string]budgetItem `json:"budget,omitempty"`
}

type pipelineOpts struct {
	mode               string
	bs, in, out, group string
	batch              int
	partitions         int           // of the input topic (reported)
	workers            int           // loops in parallel, each with its own consumer and producer (default 1)
	proc               time.Duration // processing time per record: a wait, not CPU (a call to another service)
	target             int64         // stop after this many records
	maxDur             time.Duration // or after this long from the first record
	// warm: the rate is taken from warm after the first record to the end
	// (the members' joins and first fetches not counted); 0: from the first
	// record.
	warm time.Duration
	// defaults: kgo's default share consumer settings (no ShareMaxRecords);
	// otherwise ShareMaxRecords is batch, so that a worker acquires what it
	// processes in one transaction.
	defaults bool
	// strict: the broker hands a worker at most batch records per fetch
	// and the consumer does not fetch ahead (kgo.ShareMaxRecordsStrict,
	// ShareFetch's record_limit acquire mode). The pipeline comparisons set
	// it so that a transaction holds batch records as the consumer group's
	// does (otherwise a fetch acquires whole record batches: transactions of
	// ~524 records at batch 1000); the scaling runs because without it a
	// few workers held the share partition's in-flight limit
	// (group.share.partition.max.record.locks) while the others waited.
	strict bool
	// prefetch: with strict, the consumer still fetches one fetch ahead
	// (kgo.MaxConcurrentFetches(1)): the next transaction's records are
	// acquired while this one is produced and committed, as a consumer
	// group's fetches run ahead of its polls.
	prefetch bool
	// stop, if set, ends the run when it returns true (checked per poll).
	stop func() bool
	// workerBS, if set, is where share-group worker w connects:
	// workerBS[w % len] (one sidecar per worker); otherwise bs.
	workerBS []string
}

// bsOf is where worker w connects.
func (o pipelineOpts) bsOf(w int) string {
	if len(o.workerBS) > 0 {
		return o.workerBS[w%len(o.workerBS)]
	}
	return o.bs
}

// pipeRun is what a run's workers share.
type pipeRun struct {
	o                       pipelineOpts
	records, txns, aborts   atomic.Int64
	mu                      sync.Mutex
	t0                      time.Time // first record of any worker
	last                    time.Time // the last commit (or alo poll) of any worker
	ackLat, produceLat, end []float64
	pollLat                 []float64 // the polls that returned records
	reqs                    *reqTimer // every request of the run's clients
}

func (p *pipeRun) started() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.t0, !p.t0.IsZero()
}

func (p *pipeRun) start() {
	p.mu.Lock()
	if p.t0.IsZero() {
		p.t0 = time.Now()
	}
	p.mu.Unlock()
}

func (p *pipeRun) sample(to *[]float64, since time.Time) {
	p.mu.Lock()
	*to = append(*to, time.Since(since).Seconds())
	p.mu.Unlock()
}

// done reports whether the run is over: the target reached, the time up,
// or the caller's stop.
func (p *pipeRun) done() bool {
	if p.records.Load() >= p.o.target || (p.o.stop != nil && p.o.stop()) {
		return true
	}
	t0, ok := p.started()
	return ok && time.Since(t0) > p.o.maxDur
}

// committed counts n records of one finished transaction (or poll).
func (p *pipeRun) committed(n int) {
	p.mu.Lock()
	p.records.Add(int64(n))
	p.txns.Add(1)
	p.last = time.Now()
	p.mu.Unlock()
}

// outputsOf are one output per input: the same value, keyed by the input's
// partition and offset (the id the exactly-once check counts).
func outputsOf(recs []*kgo.Record) []*kgo.Record {
	outs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		outs[i] = &kgo.Record{Key: fmt.Appendf(nil, "%d:%d", r.Partition, r.Offset), Value: r.Value}
	}
	return outs
}

// process is the records' processing time: a wait.
func (p *pipeRun) process(ctx context.Context, n int) {
	if p.o.proc <= 0 {
		return
	}
	t := time.NewTimer(p.o.proc * time.Duration(n))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// polled checks a poll's errors (a poll's own timeout is none).
func polled(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			ferr = err
		}
	})
	if ferr != nil {
		return fmt.Errorf("poll: %w", ferr)
	}
	return nil
}

// runPipeline runs o.workers consume-transform-produce loops of o.mode in
// parallel until o.target records or o.maxDur, and reports their sum.
func runPipeline(ctx context.Context, o pipelineOpts) (*pipelineResult, error) {
	o.workers = max(o.workers, 1)
	p := &pipeRun{o: o, reqs: newReqTimer()}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The warm mark: the count and time once warm has passed (the rate is
	// taken from there to the last commit).
	var warmRecs atomic.Int64
	var warmAt atomic.Int64 // unix nanos; 0: not yet
	if o.warm > 0 {
		go func() {
			tk := time.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
				if t0, ok := p.started(); ok && time.Since(t0) >= o.warm {
					warmRecs.Store(p.records.Load())
					warmAt.Store(time.Now().UnixNano())
					return
				}
			}
		}()
	}
	errs := make(chan error, o.workers)
	for w := 0; w < o.workers; w++ {
		go func() {
			var err error
			if o.mode == modeGroupEOS {
				err = p.groupWorker(ctx, w)
			} else {
				err = p.shareWorker(ctx, w)
			}
			if err != nil {
				cancel() // one worker failing ends the run
			}
			errs <- err
		}()
	}
	var err error
	for w := 0; w < o.workers; w++ {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s batch %d, %d worker(s): %w", o.mode, o.batch, o.workers, err)
	}
	t0, ok := p.started()
	if !ok || p.last.IsZero() {
		return nil, fmt.Errorf("%s batch %d: no records", o.mode, o.batch)
	}
	// The run ends at its last commit: an idle worker's poll (up to 2s,
	// a consumer-group member without a partition) is not counted.
	end := p.last
	res := &pipelineResult{Mode: o.mode, Batch: o.batch, Workers: o.workers, ProcMs: float64(o.proc) / float64(time.Millisecond), Language: "go",
		Records: p.records.Load(), Transactions: p.txns.Load(), Aborts: p.aborts.Load()}
	from, base := t0, int64(0)
	if at := warmAt.Load(); at != 0 && time.Unix(0, at).Before(end) {
		from, base = time.Unix(0, at), warmRecs.Load()
	}
	d := end.Sub(from)
	res.Seconds = d.Seconds()
	res.RecordsSec = float64(res.Records-base) / d.Seconds()
	if res.Transactions > 0 {
		res.AvgBatch = float64(res.Records) / float64(res.Transactions)
	}
	res.ProduceP50Ms = sampleQuantile(0.5, p.produceLat) * 1000
	res.ProduceP99Ms = sampleQuantile(0.99, p.produceLat) * 1000
	if o.mode != modeALO {
		res.EndTxnP50Ms = sampleQuantile(0.5, p.end) * 1000
	}
	if o.mode == modeTxn || o.mode == modeTxnSeq {
		res.TxnAckP50Ms = sampleQuantile(0.5, p.ackLat) * 1000
		res.TxnAckP99Ms = sampleQuantile(0.99, p.ackLat) * 1000
	}
	res.Budget = p.clientBudget(kip1289.DefaultKey)
	return res, nil
}

// pollLoop polls up to batch records with poll until the run is done and
// hands each non-empty poll to handle; deadline bounds the wait for the
// first records (a join may take a while).
func (p *pipeRun) pollLoop(ctx context.Context, poll func(context.Context, int) kgo.Fetches, handle func([]*kgo.Record) error) error {
	deadline := time.Now().Add(p.o.maxDur + 30*time.Second)
	for !p.done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d records in %s", p.records.Load(), p.o.maxDur+30*time.Second)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		t := time.Now()
		fs := poll(pctx, p.o.batch)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := polled(fs); err != nil {
			return err
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		p.start()
		p.sample(&p.pollLat, t)
		if err := handle(recs); err != nil {
			return err
		}
	}
	return nil
}

// shareWorker is one share-group loop (every mode but group-eos): poll up
// to batch records, wait the processing time, produce one output per input,
// then acknowledge as the mode says.
func (p *pipeRun) shareWorker(ctx context.Context, w int) error {
	o := p.o
	transactional := o.mode != modeALO
	copts := []kgo.Opt{kgo.ShareGroup(o.group), kgo.ConsumeTopics(o.in), kgo.WithHooks(p.reqs)}
	if !o.defaults {
		copts = append(copts, kgo.ShareMaxRecords(int32(o.batch)))
	}
	if o.strict {
		copts = append(copts, kgo.ShareMaxRecordsStrict())
		if o.prefetch {
			copts = append(copts, kgo.MaxConcurrentFetches(1))
		}
	}
	bs := o.bsOf(w)
	consumer, err := newClient(bs, copts...)
	if err != nil {
		return err
	}
	defer closeWithin(consumer, 15*time.Second)
	popts := []kgo.Opt{kgo.DefaultProduceTopic(o.out), kgo.MetadataMinAge(250 * time.Millisecond), kgo.WithHooks(p.reqs)}
	// Every transactional mode runs a client.Producer, so that they differ
	// only in binding the acknowledgements.
	var txnProducer *client.Producer
	var producer *kgo.Client
	if transactional {
		popts = append(popts, kgo.TransactionalID(fmt.Sprintf("bench-%s-%d-w%d-%d", o.group, o.batch, w, time.Now().UnixNano())))
		txnProducer, err = client.NewProducer(clientOpts(bs, popts...))
		if err == nil {
			producer = txnProducer.Client()
		}
	} else {
		producer, err = newClient(bs, popts...)
	}
	if err != nil {
		return err
	}
	defer closeWithin(producer, 15*time.Second)
	if transactional {
		if err := initProducerID(ctx, producer); err != nil {
			return err
		}
	}
	md := client.NewShareGroupMetadata(o.group)
	failedInARow := 0
	return p.pollLoop(ctx, consumer.PollRecords, func(recs []*kgo.Record) error {
		p.process(ctx, len(recs))
		outs := outputsOf(recs)
		if !transactional {
			t := time.Now()
			if err := producer.ProduceSync(ctx, outs...).FirstErr(); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			p.sample(&p.produceLat, t)
			for _, r := range recs {
				r.Ack(kgo.AckAccept)
			}
			p.committed(len(recs))
			return nil
		}
		bind := o.mode == modeTxn || o.mode == modeTxnSeq
		if err := txnOnce(ctx, txnProducer, recs, outs, md, bind, o.mode == modeTxnSeq, p); err != nil {
			p.aborts.Add(1)
			if failedInARow++; failedInARow >= 5 {
				return fmt.Errorf("5 transactions in a row failed, the last: %w", err)
			}
			return nil
		}
		failedInARow = 0
		p.committed(len(recs))
		return nil
	})
}

// groupWorker is one consumer-group exactly-once loop, direct: a
// GroupTransactSession (the consumer's offsets committed in the
// producer's transaction, as Java's sendOffsetsToTransaction does).
func (p *pipeRun) groupWorker(ctx context.Context, w int) error {
	o := p.o
	sess, err := kgo.NewGroupTransactSession(clientOpts(o.bs,
		kgo.ConsumerGroup(o.group), kgo.ConsumeTopics(o.in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DefaultProduceTopic(o.out), kgo.MetadataMinAge(250*time.Millisecond), kgo.WithHooks(p.reqs),
		kgo.TransactionalID(fmt.Sprintf("bench-%s-%d-w%d-%d", o.group, o.batch, w, time.Now().UnixNano())))...)
	if err != nil {
		return err
	}
	defer func() {
		done := make(chan struct{})
		go func() { sess.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
	}()
	if err := initProducerID(ctx, sess.Client()); err != nil {
		return err
	}
	failedInARow := 0
	return p.pollLoop(ctx, sess.PollRecords, func(recs []*kgo.Record) error {
		p.process(ctx, len(recs))
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var perr atomic.Value
		for _, r := range outputsOf(recs) {
			sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.CompareAndSwap(nil, err)
				}
			})
		}
		t := time.Now()
		try := kgo.TryCommit
		if perr.Load() != nil {
			try = kgo.TryAbort
		}
		committed, err := sess.End(ctx, try)
		if err == nil && committed {
			p.sample(&p.end, t)
			failedInARow = 0
			p.committed(len(recs))
			return nil
		}
		// Not committed (a rebalance, or a failed produce): the session
		// aborted and rewinds to the committed offsets.
		p.aborts.Add(1)
		if failedInARow++; failedInARow >= 5 {
			return fmt.Errorf("5 transactions in a row failed, the last: committed=%v err=%v produce=%v", committed, err, perr.Load())
		}
		return nil
	})
}

// initProducerID runs InitProducerId now, not on the first produce.
func initProducerID(ctx context.Context, cl *kgo.Client) error {
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := cl.ProducerID(ictx); err != nil {
		return fmt.Errorf("InitProducerId: %w", err)
	}
	return nil
}

// txnOnce runs one transaction; on any failure it aborts and releases the
// records for redelivery (client.ReleaseForRedelivery). With bindAcks the
// ACCEPTs are bound to the transaction; without, they are sent explicitly
// after the commit.
func txnOnce(ctx context.Context, producer *client.Producer, recs, outs []*kgo.Record, md client.ShareGroupMetadata, bindAcks, sequential bool, p *pipeRun) error {
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
			p.sample(&p.produceLat, t)
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
			p.sample(&p.ackLat, ta)
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
			p.sample(&p.end, t)
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
