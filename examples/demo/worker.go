package main

// The example application: one consume-transform-produce worker process,
// started by the demo as `demo worker ...` (its own binary re-executed).
//
// Mode exactly-once: a share consumer and a transactional producer
// (client.NewProducer), both through sharetx. Per poll: one transaction
// holding an output record per input and the inputs' ACCEPT
// acknowledgements (Producer.SendShareAcknowledgementsToTransaction), then
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
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/e2e/sim"
)

const (
	modeEOS = "exactly-once"
	modeALO = "at-least-once"
)

type workerConfig struct {
	sim.WorkerConfig
	mode       string
	recordTime time.Duration
}

func (c workerConfig) args() []string {
	args := append([]string{sim.WorkerArg, "--mode", c.mode}, c.WorkerConfig.Args()...)
	return append(args, "--record-time", c.recordTime.String())
}

type worker struct {
	sim.Worker
	cfg workerConfig
	rng *rand.Rand

	crashMu sync.Mutex
	crashAt string

	commits, aborts, batches int
}

func workerMain(args []string) int {
	var c workerConfig
	fs := flag.NewFlagSet("demo worker", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", modeEOS, "exactly-once or at-least-once")
	c.Flags(fs, 20, 0.1)
	fs.DurationVar(&c.recordTime, "record-time", 30*time.Millisecond, "simulated processing time per record")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !c.Complete(c.mode == modeEOS) ||
		(c.mode != modeEOS && c.mode != modeALO) {
		fmt.Fprintln(os.Stderr, "demo worker: --mode exactly-once|at-least-once, --bootstrap, --group, --in, --out (and --txn-id) are required")
		return 2
	}
	w := &worker{cfg: c, rng: rand.New(rand.NewSource(c.Seed))}
	w.MD = client.NewShareGroupMetadata(c.Group)
	return w.run()
}

// command handles a command line from the demo other than stop.
func (w *worker) command(f []string, line string) bool {
	if len(f) != 2 || f[0] != "crash-at" {
		return false
	}
	w.crashMu.Lock()
	w.crashAt = f[1]
	w.crashMu.Unlock()
	return true
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
		w.Say("AT %s", name)
		time.Sleep(30 * time.Second) // killed long before
	}
}

func (w *worker) common() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(w.cfg.Bootstrap),
		kgo.ClientID("demo-worker"),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
	}
}

func (w *worker) run() int {
	// SIGTERM/SIGINT and the end of stdin (the demo is gone): the same as "stop".
	w.Listen(w.command)

	var err error
	w.Consumer, err = kgo.NewClient(append(w.common(), w.cfg.ConsumerOpts()...)...)
	if err != nil {
		w.Say("ERR consumer: %v", err)
		return 1
	}
	if w.cfg.mode == modeEOS {
		w.Producer, err = w.newTxnProducer()
	} else {
		w.Plain, err = kgo.NewClient(append(w.common(), kgo.DefaultProduceTopic(w.cfg.Out), kgo.ProducerLinger(0))...)
	}
	if err != nil {
		w.Say("ERR producer: %v", err)
		return 1
	}
	w.Say("READY")

	w.PollLoop(w.cfg.MaxPoll, time.Second, func(recs []*kgo.Record, _ time.Time) {
		// The "transformation": simulated work, so that the run lasts long
		// enough for the crashes to land in it.
		time.Sleep(time.Duration(len(recs)) * w.cfg.recordTime)
		if w.cfg.mode == modeEOS {
			w.transact(recs)
		} else {
			w.produceThenAck(recs)
		}
	})

	w.CloseClients(20 * time.Second)
	w.Say("EXIT")
	return 0
}

// ------------------------------------------------------------ exactly-once

// newTxnProducer builds this incarnation's transactional producer and
// initializes it at once (InitProducerId): that fences the previous
// incarnation of the same transactional id and aborts the transaction it
// left open, so its staged acknowledgements are dropped and its records
// redelivered.
func (w *worker) newTxnProducer() (*client.Producer, error) {
	p, err := client.NewProducer(append(w.common(), sim.TxnProducerOpts(w.cfg.TxnID, 20*time.Second, w.cfg.Out)...))
	if err != nil {
		return nil, err
	}
	w.InitProducer(p, 20*time.Second) // if it fails, kgo retries on the first produce
	return p, nil
}

func (w *worker) recreateProducer(why string) {
	w.Say("ERR recreating the producer: %s", why)
	w.Producer.Close()
	p, err := w.newTxnProducer()
	if err != nil {
		w.Say("ERR new producer: %v", err)
		os.Exit(1)
	}
	w.Producer = p
}

// transact: one poll, one transaction.
func (w *worker) transact(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Producer.BeginTransaction(); err != nil {
		w.recreateProducer("begin: " + err.Error())
		if err := w.Producer.BeginTransaction(); err != nil {
			client.ReleaseForRedelivery(recs...)
			w.aborts++
			w.Say("TXN abort n=%d commits=%d aborts=%d reason=%s", len(recs), w.commits, w.aborts, sim.OneLine("begin: "+err.Error()))
			return
		}
	}
	w.Say("TXN begin")
	acks := client.NewShareAcknowledgements()
	for _, r := range recs {
		acks.Add(r, client.Accept)
	}
	err := w.Producer.ProduceSync(ctx, sim.Outputs(recs)...).FirstErr()
	if err != nil {
		err = fmt.Errorf("produce: %w", err)
	} else {
		w.Say("PRODUCED n=%d", len(recs))
		// The inputs' ACCEPT, bound to the transaction: applied if and
		// only if it commits.
		if err = w.Producer.SendShareAcknowledgementsToTransaction(ctx, acks, w.MD); err != nil {
			err = fmt.Errorf("TxnShareAcknowledge: %w", err)
		}
	}
	if err == nil {
		w.point("produced")
	}
	if err == nil && w.rng.Float64() >= w.cfg.AbortRate {
		if cerr := w.Producer.EndTransaction(ctx, kgo.TryCommit); cerr == nil {
			w.commits++
			w.Say("TXN commit n=%d commits=%d aborts=%d", len(recs), w.commits, w.aborts)
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
	if aerr := w.Producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		w.recreateProducer("abort: " + aerr.Error())
	}
	// Aborted: the records must be redelivered, never implicitly accepted
	// by the next poll.
	client.ReleaseForRedelivery(recs...)
	w.aborts++
	w.Say("TXN abort n=%d commits=%d aborts=%d reason=%s", len(recs), w.commits, w.aborts, sim.OneLine(reason))
}

// ------------------------------------------------------------ at-least-once

// produceThenAck: produce the outputs, then acknowledge the inputs. A crash
// in between leaves outputs whose inputs are redelivered: duplicates.
func (w *worker) produceThenAck(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Plain.ProduceSync(ctx, sim.Outputs(recs)...).FirstErr(); err != nil {
		w.Say("ERR produce: %v", err)
		for _, r := range recs {
			r.Ack(kgo.AckRelease) // redeliver (the next poll would accept them)
		}
		return
	}
	w.Say("PRODUCED n=%d", len(recs))
	w.point("produced")
	for _, r := range recs {
		r.Ack(kgo.AckAccept)
	}
	if err := w.Consumer.FlushAcks(ctx); err != nil {
		w.Say("ERR flush acks: %v", err)
	}
	w.batches++
	w.Say("ACK n=%d batches=%d", len(recs), w.batches)
	w.point("committed")
}
