package main

// The example application: one consume-transform-produce worker process,
// started by the demo as `demo worker ...` (its own binary re-executed).
//
// Mode exactly-once: a share consumer and a transactional producer, both
// through sharetx and built with client.ClientOpts. Per poll: one
// transaction holding an output record per input and the inputs' ACCEPT
// acknowledgements (client.SendShareAcknowledgementsToTransaction), then
// commit — or, now and then on purpose, abort and client.ReleaseForRedelivery.
//
// Mode at-least-once: the same application without transactions: a plain
// producer; per poll, produce the outputs, then ACCEPT the inputs
// (Record.Ack + FlushAcks).
//
// It talks to the demo through lines:
//
//	stdout  READY
//	        TXN begin
//	        PRODUCED n=<records>  outputs produced (exactly-once: in the open transaction)
//	        TXN commit n=<records> commits=<c> aborts=<a>
//	        TXN abort n=<records> commits=<c> aborts=<a> reason=<why>
//	        ACK n=<records> batches=<b>
//	        AT <point>       reached the point the demo asked to crash at; waits to be killed
//	        ERR <what>
//	        EXIT
//	stdin   crash-at <point> at the next <point> say AT and wait for kill -9
//	                         (produced: outputs produced (and, exactly-once,
//	                         acknowledgements bound to the transaction), not
//	                         committed/acknowledged; committed: right after the
//	                         commit/acknowledgement)
//	        stop             finish the current batch and exit (EOF: the same)

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
)

const (
	modeEOS = "exactly-once"
	modeALO = "at-least-once"
)

type workerConfig struct {
	mode       string
	bootstrap  string
	group      string
	in, out    string
	txnID      string
	maxPoll    int
	recordTime time.Duration
	abortRate  float64
	seed       int64
}

func (c workerConfig) args() []string {
	return []string{"worker", "--mode", c.mode, "--bootstrap", c.bootstrap, "--group", c.group, "--in", c.in, "--out", c.out,
		"--txn-id", c.txnID, "--max-poll", fmt.Sprint(c.maxPoll), "--record-time", c.recordTime.String(),
		"--abort-rate", fmt.Sprint(c.abortRate), "--seed", fmt.Sprint(c.seed)}
}

type worker struct {
	cfg      workerConfig
	rng      *rand.Rand
	consumer *kgo.Client
	producer *kgo.Client
	md       client.ShareGroupMetadata

	outMu   sync.Mutex
	stop    atomic.Bool
	crashMu sync.Mutex
	crashAt string

	commits, aborts, batches int
}

func workerMain(args []string) int {
	var c workerConfig
	fs := flag.NewFlagSet("demo worker", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", modeEOS, "exactly-once or at-least-once")
	fs.StringVar(&c.bootstrap, "bootstrap", "", "sharetx's bootstrap address")
	fs.StringVar(&c.group, "group", "", "share group")
	fs.StringVar(&c.in, "in", "", "input topic")
	fs.StringVar(&c.out, "out", "", "output topic")
	fs.StringVar(&c.txnID, "txn-id", "", "transactional id (exactly-once)")
	fs.IntVar(&c.maxPoll, "max-poll", 20, "records per poll at most")
	fs.DurationVar(&c.recordTime, "record-time", 30*time.Millisecond, "simulated processing time per record")
	fs.Float64Var(&c.abortRate, "abort-rate", 0.1, "fraction of transactions aborted on purpose (exactly-once)")
	fs.Int64Var(&c.seed, "seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.bootstrap == "" || c.group == "" || c.in == "" || c.out == "" || (c.mode == modeEOS && c.txnID == "") ||
		(c.mode != modeEOS && c.mode != modeALO) {
		fmt.Fprintln(os.Stderr, "demo worker: --mode exactly-once|at-least-once, --bootstrap, --group, --in, --out (and --txn-id) are required")
		return 2
	}
	w := &worker{cfg: c, rng: rand.New(rand.NewSource(c.seed)), md: client.NewShareGroupMetadata(c.group)}
	return w.run()
}

func (w *worker) say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func (w *worker) readCommands() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "stop":
			w.stop.Store(true)
		case len(f) == 2 && f[0] == "crash-at":
			w.crashMu.Lock()
			w.crashAt = f[1]
			w.crashMu.Unlock()
		case len(f) > 0:
			w.say("ERR unknown command %q", sc.Text())
		}
	}
	w.stop.Store(true) // the demo is gone
}

// point: if the demo asked to crash here, say so and wait for the kill -9.
func (w *worker) point(name string) {
	w.crashMu.Lock()
	hit := w.crashAt == name
	if hit {
		w.crashAt = ""
	}
	w.crashMu.Unlock()
	if hit {
		w.say("AT %s", name)
		time.Sleep(30 * time.Second) // killed long before
	}
}

func (w *worker) common() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(w.cfg.bootstrap),
		kgo.ClientID("demo-worker"),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
	}
}

func (w *worker) run() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; w.stop.Store(true) }()
	go w.readCommands()

	var err error
	consumerOpts := append(w.common(),
		kgo.ShareGroup(w.cfg.group),
		kgo.ConsumeTopics(w.cfg.in),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ShareMaxRecords(int32(w.cfg.maxPoll)),
	)
	if w.cfg.mode == modeEOS {
		consumerOpts = append(consumerOpts, client.ClientOpts()...)
	}
	w.consumer, err = kgo.NewClient(consumerOpts...)
	if err != nil {
		w.say("ERR consumer: %v", err)
		return 1
	}
	if w.cfg.mode == modeEOS {
		w.producer, err = w.newTxnProducer()
	} else {
		w.producer, err = kgo.NewClient(append(w.common(), kgo.DefaultProduceTopic(w.cfg.out), kgo.ProducerLinger(0))...)
	}
	if err != nil {
		w.say("ERR producer: %v", err)
		return 1
	}
	w.say("READY")

	for !w.stop.Load() {
		pctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := w.consumer.PollRecords(pctx, w.cfg.maxPoll)
		cancel()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				w.say("ERR poll %s/%d: %v", t, p, err)
			}
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		// The "transformation": simulated work, so that the run lasts long
		// enough for the crashes to land in it.
		time.Sleep(time.Duration(len(recs)) * w.cfg.recordTime)
		if w.cfg.mode == modeEOS {
			w.transact(recs)
		} else {
			w.produceThenAck(recs)
		}
	}

	done := make(chan struct{})
	go func() { w.consumer.Close(); w.producer.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		w.say("ERR closing the clients takes more than 20s")
	}
	w.say("EXIT")
	return 0
}

// outputs: one output record per input, its value the input's id.
func outputs(recs []*kgo.Record) []*kgo.Record {
	outs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		outs[i] = &kgo.Record{Key: r.Value, Value: r.Value}
	}
	return outs
}

// ------------------------------------------------------------ exactly-once

// newTxnProducer builds this incarnation's transactional producer and
// initializes it at once (InitProducerId): that fences the previous
// incarnation of the same transactional id and aborts the transaction it
// left open, so its staged acknowledgements are dropped and its records
// redelivered.
func (w *worker) newTxnProducer() (*kgo.Client, error) {
	p, err := kgo.NewClient(append(append(w.common(),
		kgo.TransactionalID(w.cfg.txnID),
		kgo.TransactionTimeout(20*time.Second),
		kgo.DefaultProduceTopic(w.cfg.out),
		kgo.MetadataMinAge(250*time.Millisecond),
	), client.ClientOpts()...)...)
	if err != nil {
		return nil, err
	}
	for attempt := 1; attempt <= 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, _, err = p.ProducerID(ctx)
		cancel()
		if err == nil {
			return p, nil
		}
		w.say("ERR InitProducerId (attempt %d): %v", attempt, err)
		time.Sleep(time.Second)
	}
	return p, nil // kgo retries on the first produce
}

func (w *worker) recreateProducer(why string) {
	w.say("ERR recreating the producer: %s", why)
	w.producer.Close()
	p, err := w.newTxnProducer()
	if err != nil {
		w.say("ERR new producer: %v", err)
		os.Exit(1)
	}
	w.producer = p
}

// transact: one poll, one transaction.
func (w *worker) transact(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.producer.BeginTransaction(); err != nil {
		w.recreateProducer("begin: " + err.Error())
		if err := w.producer.BeginTransaction(); err != nil {
			client.ReleaseForRedelivery(recs...)
			w.aborts++
			w.say("TXN abort n=%d commits=%d aborts=%d reason=%s", len(recs), w.commits, w.aborts, oneLine("begin: "+err.Error()))
			return
		}
	}
	w.say("TXN begin")
	acks := client.NewShareAcknowledgements()
	for _, r := range recs {
		acks.Add(r, client.Accept)
	}
	err := w.producer.ProduceSync(ctx, outputs(recs)...).FirstErr()
	if err != nil {
		err = fmt.Errorf("produce: %w", err)
	} else {
		w.say("PRODUCED n=%d", len(recs))
		// The inputs' ACCEPT, bound to the transaction: applied if and
		// only if it commits.
		if err = client.SendShareAcknowledgementsToTransaction(ctx, w.producer, acks, w.md); err != nil {
			err = fmt.Errorf("TxnShareAcknowledge: %w", err)
		}
	}
	if err == nil {
		w.point("produced")
	}
	if err == nil && w.rng.Float64() >= w.cfg.abortRate {
		if cerr := w.producer.EndTransaction(ctx, kgo.TryCommit); cerr == nil {
			w.commits++
			w.say("TXN commit n=%d commits=%d aborts=%d", len(recs), w.commits, w.aborts)
			w.point("committed")
			return
		} else {
			err = fmt.Errorf("commit: %w", cerr)
		}
	}
	reason := "random abort"
	if err != nil {
		reason = err.Error()
	}
	if aerr := w.producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		w.recreateProducer("abort: " + aerr.Error())
	}
	// Aborted: the records must be redelivered, never implicitly accepted
	// by the next poll.
	client.ReleaseForRedelivery(recs...)
	w.aborts++
	w.say("TXN abort n=%d commits=%d aborts=%d reason=%s", len(recs), w.commits, w.aborts, oneLine(reason))
}

// ------------------------------------------------------------ at-least-once

// produceThenAck: produce the outputs, then acknowledge the inputs. A crash
// in between leaves outputs whose inputs are redelivered: duplicates.
func (w *worker) produceThenAck(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.producer.ProduceSync(ctx, outputs(recs)...).FirstErr(); err != nil {
		w.say("ERR produce: %v", err)
		for _, r := range recs {
			r.Ack(kgo.AckRelease) // redeliver (the next poll would accept them)
		}
		return
	}
	w.say("PRODUCED n=%d", len(recs))
	w.point("produced")
	for _, r := range recs {
		r.Ack(kgo.AckAccept)
	}
	if err := w.consumer.FlushAcks(ctx); err != nil {
		w.say("ERR flush acks: %v", err)
	}
	w.batches++
	w.say("ACK n=%d batches=%d", len(recs), w.batches)
	w.point("committed")
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
