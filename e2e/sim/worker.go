package sim

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// WorkerArg is the first argument of a binary re-executed as a worker:
// `<binary> worker ...`.
const WorkerArg = "worker"

// RunIfWorker runs worker with the arguments after WorkerArg, and exits
// with its status, if this process is a re-executed worker: os.Args[1] is
// WorkerArg and, when roleEnv is not empty (a test binary, whose own
// arguments must not be mistaken for that), the environment variable
// roleEnv is "worker" too. Otherwise it returns.
func RunIfWorker(roleEnv string, worker func(args []string) int) {
	if len(os.Args) > 1 && os.Args[1] == WorkerArg && (roleEnv == "" || os.Getenv(roleEnv) == WorkerArg) {
		os.Exit(worker(os.Args[2:]))
	}
}

// Main is the main function of a program that re-executes itself as its
// workers: `<binary> worker ...` runs worker; anything else runs run with
// the arguments, stdout and stderr. It exits with their status.
func Main(worker func(args []string) int, run func(args []string, stdout, stderr io.Writer) int) {
	RunIfWorker("", worker)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// TestMain is the TestMain of such a program's tests: the test binary is
// re-executed as the worker too (with roleEnv=worker), otherwise it runs
// the tests.
func TestMain(m interface{ Run() int }, roleEnv string, worker func(args []string) int) {
	RunIfWorker(roleEnv, worker)
	os.Exit(m.Run())
}

// WorkerEnv is the environment of a re-executed worker: this process's,
// with roleEnv=worker (see RunIfWorker).
func WorkerEnv(roleEnv string) []string {
	return append(os.Environ(), roleEnv+"="+WorkerArg)
}

// WorkerConfig is what every worker process is told on its command line
// (a program adds its own flags).
type WorkerConfig struct {
	Bootstrap string // sharetx's bootstrap address
	Group     string // the share group
	In, Out   string // the input and output topics
	TxnID     string // the transactional id
	MaxPoll   int    // records per poll at most
	AbortRate float64
	Seed      int64
}

// Flags registers the configuration's flags on fs, with the program's
// defaults for max-poll and abort-rate.
func (c *WorkerConfig) Flags(fs *flag.FlagSet, maxPoll int, abortRate float64) {
	fs.StringVar(&c.Bootstrap, "bootstrap", "", "sharetx's bootstrap address")
	fs.StringVar(&c.Group, "group", "", "share group")
	fs.StringVar(&c.In, "in", "", "input topic")
	fs.StringVar(&c.Out, "out", "", "output topic")
	fs.StringVar(&c.TxnID, "txn-id", "", "transactional id")
	fs.IntVar(&c.MaxPoll, "max-poll", maxPoll, "records per poll at most")
	fs.Float64Var(&c.AbortRate, "abort-rate", abortRate, "fraction of transactions aborted on purpose")
	fs.Int64Var(&c.Seed, "seed", 1, "random seed")
}

// Args are the flags that give a worker this configuration.
func (c WorkerConfig) Args() []string {
	return []string{"--bootstrap", c.Bootstrap, "--group", c.Group, "--in", c.In, "--out", c.Out,
		"--txn-id", c.TxnID, "--max-poll", fmt.Sprint(c.MaxPoll), "--abort-rate", fmt.Sprint(c.AbortRate),
		"--seed", fmt.Sprint(c.Seed)}
}

// Complete reports whether bootstrap, group, in and out are set, and the
// transactional id if txn.
func (c WorkerConfig) Complete(txn bool) bool {
	return c.Bootstrap != "" && c.Group != "" && c.In != "" && c.Out != "" && (!txn || c.TxnID != "")
}

// ConsumerOpts are the share consumer's options (to be added to the
// worker's common ones).
func (c WorkerConfig) ConsumerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ShareGroup(c.Group),
		kgo.ConsumeTopics(c.In),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.ShareMaxRecords(int32(c.MaxPoll)),
	}
}

// Worker is what a consume-transform-produce worker process does whatever
// it does with its records: it prints protocol lines on stdout for its
// parent, reads commands from stdin, stops when told (or on SIGTERM,
// SIGINT, or the end of stdin), polls its share consumer and closes its
// clients. A program's worker embeds it.
type Worker struct {
	Consumer *kgo.Client // the share consumer
	// Producer is the transactional producer; a worker that produces
	// without transactions uses Plain instead.
	Producer *client.Producer
	Plain    *kgo.Client
	// MD is the share group's metadata, for transactional acknowledgements.
	MD client.ShareGroupMetadata

	outMu sync.Mutex
	stop  atomic.Bool
}

// Say prints one line on stdout.
func (w *Worker) Say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// Stopping reports whether the worker was told to stop.
func (w *Worker) Stopping() bool { return w.stop.Load() }

// Listen makes SIGTERM and SIGINT stop the worker and starts reading
// commands from stdin: "stop" stops it; any other line goes, split into
// fields, to handle, which reports whether it knew the command (if not:
// "ERR unknown command"); the end of stdin (the parent is gone) stops it.
func (w *Worker) Listen(handle func(f []string, line string) bool) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; w.stop.Store(true) }()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "stop":
				w.stop.Store(true)
			case len(f) > 0 && !handle(f, sc.Text()):
				w.Say("ERR unknown command %q", sc.Text())
			}
		}
		w.stop.Store(true)
	}()
}

// PollLoop polls the consumer for at most max records at a time, each poll
// waiting up to wait, until the worker is told to stop. Poll errors other
// than the wait running out are said as ERR lines; each non-empty batch
// goes to process with the time its poll returned.
func (w *Worker) PollLoop(max int, wait time.Duration, process func(recs []*kgo.Record, polledAt time.Time)) {
	for !w.stop.Load() {
		pctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := w.Consumer.PollRecords(pctx, max)
		cancel()
		polledAt := time.Now()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				w.Say("ERR poll %s/%d: %v", t, p, err)
			}
		})
		if recs := fs.Records(); len(recs) > 0 {
			process(recs, polledAt)
		}
	}
}

// CloseClients closes the consumer, then the producer (kgo releases what
// the consumer still holds), saying an ERR line if that takes more than d.
func (w *Worker) CloseClients(d time.Duration) {
	done := make(chan struct{})
	go func() {
		w.Consumer.Close()
		if w.Producer != nil {
			w.Producer.Close()
		}
		if w.Plain != nil {
			w.Plain.Close()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		w.Say("ERR closing the clients takes more than %s", d)
	}
}

// TxnProducerOpts are the kgo options of a worker's transactional producer
// (client.NewProducer), to be added to its common ones.
func TxnProducerOpts(txnID string, timeout time.Duration, out string) []kgo.Opt {
	return []kgo.Opt{
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(timeout),
		kgo.DefaultProduceTopic(out),
		// A produce right after the previous commit may get
		// CONCURRENT_TRANSACTIONS (markers still being written); kgo
		// retries it after a metadata refresh, which MetadataMinAge
		// (default 5s) would delay.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
}

// InitProducer initializes a transactional producer at once
// (InitProducerId, like the Java client's initTransactions): that bumps the
// epoch of the transactional id, fencing a previous incarnation and
// aborting the transaction it left open (so its staged acknowledgements are
// dropped and its records redelivered); kgo would otherwise initialize
// lazily, on the first produce. It tries 5 times, each failure said as an
// ERR line, waiting up to timeout each; ok is false if every try failed
// (kgo then retries on the first produce).
func (w *Worker) InitProducer(p *client.Producer, timeout time.Duration) (id int64, epoch int16, ok bool) {
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		id, epoch, err := p.Client().ProducerID(ctx)
		cancel()
		if err == nil {
			return id, epoch, true
		}
		w.Say("ERR InitProducerId (attempt %d): %v", attempt, err)
		if attempt == 5 {
			return 0, 0, false
		}
		time.Sleep(time.Second)
	}
}

// Closed reports whether c is closed.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Outputs are the output records of a batch: one per input, key and value
// the input's value (its id).
func Outputs(recs []*kgo.Record) []*kgo.Record {
	outs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		outs[i] = &kgo.Record{Key: r.Value, Value: r.Value}
	}
	return outs
}

// OneLine makes s fit on one protocol line.
func OneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// LineLog is an io.Writer that forwards whole lines to a test's log (a
// *testing.T) until closed; it keeps a partial line until its end comes.
type LineLog struct {
	mu     sync.Mutex
	T      interface{ Log(args ...any) }
	buf    []byte
	closed bool
}

func (l *LineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		if !l.closed {
			l.T.Log(string(l.buf[:i]))
		}
		l.buf = l.buf[i+1:]
	}
}

// Close stops the forwarding (a test must not log after it has ended).
func (l *LineLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}
