package main

// The worker: one consume-transform-produce process, started by the
// orchestrator as `chaos worker ...` (its own binary re-executed). It talks
// to the orchestrator through lines:
//
//	stdout  INIT producer_id=<id> epoch=<epoch> txn_id=<id>
//	        READY
//	        TXN commit n=<records> commits=<c> aborts=<a> ms=<timings> recs=<partition>:<offset>:<delivery>,...
//	        TXN abort n=<records> commits=<c> aborts=<a> ms=<timings> recs=... reason=<why>
//	        (timings, ms: poll wait since the previous transaction/produce/TxnShareAcknowledge/EndTxn)
//	        HOLD <point> / HOLD-END <point>
//	        ERR <what>
//	        EXIT commits=<c> aborts=<a>
//	stdin   hold <point> <duration>   at the next <point> (polled: records
//	                                  acquired, nothing produced; staged: acks
//	                                  staged in the open transaction;
//	                                  deferred: the Python worker only,
//	                                  half the acks deferred, not staged;
//	                                  committed: just committed, before the
//	                                  next poll) print HOLD and sleep <duration>
//	        stop                      finish the current transaction and exit
//	        (EOF: stop)
//
// kgo's own warnings go to stderr.

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/e2e/sim"
)

type workerConfig struct {
	sim.WorkerConfig
	name       string
	txnTimeout time.Duration
	logLevel   string
	lang       string // go or java: which program runs it (not a flag)
}

// args: the worker subcommand and its flags.
func (c workerConfig) args() []string { return append([]string{sim.WorkerArg}, c.flags()...) }

// flags are the worker's flags (the Java worker takes the same).
func (c workerConfig) flags() []string {
	args := append([]string{"--name", c.name}, c.WorkerConfig.Args()...)
	return append(args, "--txn-timeout", c.txnTimeout.String(), "--kgo-log", c.logLevel)
}

type worker struct {
	sim.Worker
	cfg workerConfig
	rng *rand.Rand

	holdMu sync.Mutex
	holds  map[string]time.Duration

	commits, aborts int
	failedInARow    int
	polledAt        time.Time
	lastEnd         time.Time // when the previous transaction ended
}

func workerMain(args []string) int {
	var c workerConfig
	fs := flag.NewFlagSet("chaos worker", flag.ContinueOnError)
	fs.StringVar(&c.name, "name", "worker", "name in logs")
	c.Flags(fs, 50, 0.15)
	fs.DurationVar(&c.txnTimeout, "txn-timeout", 20*time.Second, "transaction timeout")
	fs.StringVar(&c.logLevel, "kgo-log", "warn", "kgo log level to stderr: none, error, warn, info, debug")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !c.Complete(true) {
		fmt.Fprintln(os.Stderr, "chaos worker: --bootstrap, --group, --in, --out and --txn-id are required")
		return 2
	}
	w := &worker{cfg: c, rng: rand.New(rand.NewSource(c.Seed)), holds: map[string]time.Duration{}}
	w.MD = client.NewShareGroupMetadata(c.Group)
	return w.run()
}

func kgoLevel(s string) kgo.LogLevel {
	switch s {
	case "none":
		return kgo.LogLevelNone
	case "error":
		return kgo.LogLevelError
	case "info":
		return kgo.LogLevelInfo
	case "debug":
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (w *worker) common() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(w.cfg.Bootstrap),
		kgo.ClientID("chaos-" + w.cfg.name),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgoLevel(w.cfg.logLevel), nil)),
	}
}

// newProducer builds the transactional producer and initializes it at once
// (InitProducerId, like the Java client's initTransactions): that bumps the
// epoch of the transactional id, fencing a previous incarnation and
// aborting the transaction it left open. kgo would otherwise initialize
// lazily, on the first produce.
func (w *worker) newProducer() (*client.Producer, error) {
	p, err := w.buildProducer()
	if err != nil {
		return nil, err
	}
	if id, epoch, ok := w.InitProducer(p, 30*time.Second); ok {
		w.Say("INIT producer_id=%d epoch=%d txn_id=%s", id, epoch, w.cfg.TxnID)
	}
	return p, nil
}

func (w *worker) buildProducer() (*client.Producer, error) {
	return client.NewProducer(append(w.common(), sim.TxnProducerOpts(w.cfg.TxnID, w.cfg.txnTimeout, w.cfg.Out)...))
}

// recreateProducer replaces a producer that cannot go on (fenced, its abort
// failed, or transactions keep failing): a new InitProducerId for the same
// transactional id bumps the epoch and aborts whatever the old one left open.
func (w *worker) recreateProducer(why string) {
	w.Say("ERR recreating the producer: %s", why)
	old := w.Producer
	done := make(chan struct{})
	go func() { old.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.Say("ERR closing the old producer takes more than 10s; going on")
	}
	p, err := w.newProducer()
	if err != nil {
		w.Say("ERR new producer: %v", err)
		os.Exit(1)
	}
	w.Producer = p
	w.failedInARow = 0
}

// command handles a command line from the orchestrator other than stop.
func (w *worker) command(f []string, line string) bool {
	if len(f) != 3 || f[0] != "hold" {
		return false
	}
	d, err := time.ParseDuration(f[2])
	if err != nil {
		w.Say("ERR bad command %q: %v", line, err)
		return true
	}
	w.holdMu.Lock()
	w.holds[f[1]] = d
	w.holdMu.Unlock()
	return true
}

// hold sleeps at point if the orchestrator asked for it, and reports
// whether it did.
func (w *worker) hold(point string) bool {
	w.holdMu.Lock()
	d, ok := w.holds[point]
	delete(w.holds, point)
	w.holdMu.Unlock()
	if !ok {
		return false
	}
	w.Say("HOLD %s", point)
	time.Sleep(d)
	w.Say("HOLD-END %s", point)
	return true
}

func (w *worker) run() int {
	// SIGTERM/SIGINT and the end of stdin: the same as "stop".
	w.Listen(w.command)

	var err error
	w.Consumer, err = kgo.NewClient(append(w.common(), w.cfg.ConsumerOpts()...)...)
	if err != nil {
		w.Say("ERR consumer: %v", err)
		return 1
	}
	if w.Producer, err = w.newProducer(); err != nil {
		w.Say("ERR producer: %v", err)
		return 1
	}
	w.Say("READY")

	w.PollLoop(w.cfg.MaxPoll, 2*time.Second, func(recs []*kgo.Record, polledAt time.Time) {
		w.polledAt = polledAt
		w.hold("polled")
		w.transact(recs)
	})

	// Close: kgo releases what it still holds (records of the last poll
	// were committed or released already; the proxy absorbs client acks of
	// committed offsets).
	w.CloseClients(20 * time.Second)
	w.Say("EXIT commits=%d aborts=%d", w.commits, w.aborts)
	return 0
}

// transact processes one poll in one transaction: an output record per
// input (value = the input's value), the ACCEPT acknowledgements bound to
// the transaction, commit — or, on purpose or on any error, abort and
// release the records for redelivery.
func (w *worker) transact(recs []*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fail := func(stage string, err error) error { return fmt.Errorf("%s: %w", stage, err) }
	// Timings, ms: waiting for the poll since the previous transaction,
	// produce, TxnShareAcknowledge, EndTxn.
	var tProduce, tAck, tEnd time.Duration
	tWait := w.polledAt.Sub(w.lastEnd)
	if w.lastEnd.IsZero() {
		tWait = 0
	}
	defer func() { w.lastEnd = time.Now() }()
	ms := func() string {
		return fmt.Sprintf("%d/%d/%d/%d", tWait.Milliseconds(), tProduce.Milliseconds(), tAck.Milliseconds(), tEnd.Milliseconds())
	}
	t := time.Now()
	lap := func(d *time.Duration) { *d = time.Since(t); t = time.Now() }

	var err error
	if berr := w.Producer.BeginTransaction(); berr != nil {
		// Not in a transaction: nothing to abort. A producer that cannot
		// begin is broken (fenced, or a failed transaction was not ended).
		w.recreateProducer("begin: " + berr.Error())
		if berr = w.Producer.BeginTransaction(); berr != nil {
			w.Say("ERR begin after recreate: %v", berr)
			client.ReleaseForRedelivery(recs...)
			w.aborts++
			w.Say("TXN abort n=%d commits=%d aborts=%d reason=%s", len(recs), w.commits, w.aborts, sim.OneLine("begin: "+berr.Error()))
			return
		}
	}
	outs := sim.Outputs(recs)
	acks := client.NewShareAcknowledgements()
	for _, r := range recs {
		acks.Add(r, client.Accept)
	}
	t = time.Now()
	if perr := w.Producer.ProduceSync(ctx, outs...).FirstErr(); perr != nil {
		err = fail("produce", perr)
	}
	lap(&tProduce)
	staged := false
	if err == nil {
		if serr := w.Producer.SendShareAcknowledgementsToTransaction(ctx, acks, w.MD); serr != nil {
			err = fail("TxnShareAcknowledge", serr)
		}
		staged = err == nil
		lap(&tAck)
	}
	held := err == nil && w.hold("staged")
	// A transaction held on purpose always tries to commit: the fault is
	// about what that commit does.
	random := err == nil && !held && w.rng.Float64() < w.cfg.AbortRate
	if err == nil && !random {
		t = time.Now()
		cerr := w.Producer.EndTransaction(ctx, kgo.TryCommit)
		lap(&tEnd)
		if cerr == nil {
			w.commits++
			w.failedInARow = 0
			w.Say("TXN commit n=%d commits=%d aborts=%d ms=%s recs=%s", len(recs), w.commits, w.aborts, ms(), recList(recs))
			w.hold("committed")
			return
		}
		err = fail("commit", cerr)
	}

	// Abort. If the commit failed with an unknown outcome, TryAbort is still
	// the right call (kgo retries the commit's outcome safely).
	reason := "random"
	if err != nil {
		reason = err.Error()
		w.failedInARow++
	}
	t = time.Now()
	aerr := w.Producer.EndTransaction(ctx, kgo.TryAbort)
	lap(&tEnd)
	if aerr != nil {
		w.recreateProducer("abort: " + aerr.Error())
	} else if w.failedInARow >= 3 {
		w.recreateProducer(fmt.Sprintf("%d transactions failed in a row", w.failedInARow))
	}
	// Aborted. Staged acknowledgements: the proxy released the records
	// upstream at once, as a broker with KIP-1289 does, and absorbs the
	// next poll's implicit ACCEPT of this delivery; the worker does nothing
	// (the stock-consumer path). Nothing staged: the records are still
	// this member's, and must be released, never implicitly accepted.
	if !staged {
		client.ReleaseForRedelivery(recs...)
	}
	w.aborts++
	w.Say("TXN abort n=%d commits=%d aborts=%d ms=%s recs=%s reason=%s", len(recs), w.commits, w.aborts, ms(), recList(recs), sim.OneLine(reason))
}

// recList is partition:offset:deliveryCount of every record, for the
// orchestrator's duplicate diagnosis.
func recList(recs []*kgo.Record) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", r.Partition, r.Offset, r.DeliveryCount())
	}
	return b.String()
}
