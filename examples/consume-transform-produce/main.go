// Command consume-transform-produce is exactly-once consume-transform-produce
// with a share group, through the sharetx sidecar, in Go: each poll is one
// transaction that holds the outputs (one per input, its value upper-cased)
// and the inputs' ACCEPT acknowledgements. Commit: both take effect. Abort:
// neither does, and the inputs are delivered again (to this member or another
// one).
//
//	go run ./cmd/sharetx     # terminal 1: the sidecar with its embedded cluster, 127.0.0.1:9092
//	go run ./examples/consume-transform-produce --seed 1000 --max-records 1000 --abort-every 5
//
// The share consumer is a plain franz-go client; the producer is
// client.NewProducer (a kgo client that can send TxnShareAcknowledge). Both
// name the sidecar in kgo.SeedBrokers. Ctrl-C stops it after the current
// transaction.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/examples/internal/exampleutil"
)

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "the sidecar (go run ./cmd/sharetx)")
	group := flag.String("group", "ctp-example", "share group")
	input := flag.String("input", "orders", "input topic")
	output := flag.String("output", "orders-upper", "output topic")
	txnID := flag.String("txn-id", "ctp-example-1", "transactional id (one per instance)")
	maxRecords := flag.Int("max-records", 0, "stop once that many inputs are committed (0: no limit)")
	maxSeconds := flag.Int("max-seconds", 0, "stop after that many seconds (0: no limit)")
	maxPoll := flag.Int("max-poll", 500, "records per poll, and so per transaction")
	seed := flag.Int("seed", 0, "create the topics and produce that many inputs first")
	abortEvery := flag.Int("abort-every", 0, "abort every n-th transaction on purpose, to watch the inputs come back")
	flag.Parse()

	ctx, stop := exampleutil.Interruptible()
	defer stop()
	if *maxSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*maxSeconds)*time.Second)
		defer cancel()
	}
	if *seed > 0 {
		if err := exampleutil.Seed(ctx, *bootstrap, *group, *input, "order", *seed, *output); err != nil {
			fmt.Println("seed:", err)
			os.Exit(1)
		}
	}

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(*bootstrap),
		kgo.ShareGroup(*group),
		kgo.ConsumeTopics(*input),
		kgo.ShareMaxRecords(int32(*maxPoll)),
	)
	if err != nil {
		fmt.Println("consumer:", err)
		os.Exit(1)
	}
	producer, err := client.NewProducer([]kgo.Opt{
		kgo.SeedBrokers(*bootstrap),
		kgo.TransactionalID(*txnID),
		kgo.DefaultProduceTopic(*output),
	})
	if err != nil {
		fmt.Println("producer:", err)
		os.Exit(1)
	}
	md := client.NewShareGroupMetadata(*group)

	var in, out, commits, aborts int
	start, lastReport := time.Now(), time.Now()
	status := 0
	fmt.Printf("consuming %s as share group %s, producing to %s in transactions of %s, through %s\n", *input, *group, *output, *txnID, *bootstrap)
	for *maxRecords == 0 || out < *maxRecords {
		if time.Since(lastReport) >= 2*time.Second {
			fmt.Printf("progress: in=%d out=%d commits=%d aborts=%d\n", in, out, commits, aborts)
			lastReport = time.Now()
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		records := consumer.PollRecords(pctx, *maxPoll).Records()
		cancel()
		if ctx.Err() != nil {
			break // Ctrl-C or --max-seconds: nothing of this poll is processed; Close releases it
		}
		if len(records) == 0 {
			continue
		}
		in += len(records)

		// A transaction that is begun is finished, whatever ctx does.
		tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := transact(tctx, producer, md, records, *abortEvery > 0 && (commits+aborts+1)%*abortEvery == 0)
		cancel()
		switch {
		case err == nil:
			commits++
			out += len(records)
		case fatal(err):
			fmt.Println("stopping:", err) // another instance took over, or no sidecar
			status = 1
		default:
			aborts++
			fmt.Printf("aborted a transaction of %d records: %v\n", len(records), err)
		}
		if status != 0 {
			break
		}
	}
	consumer.Close() // sends the last acknowledgements, releases anything else
	producer.Close()
	fmt.Printf("summary: in=%d out=%d commits=%d aborts=%d (%.1f s)\n", in, out, commits, aborts, time.Since(start).Seconds())
	os.Exit(status)
}

// transact is one poll's transaction, in the order client/doc.go recommends:
// begin, produce the outputs asynchronously, send the acknowledgements while
// they are in flight, flush, commit. On any failure it aborts and releases
// the records, so that they are redelivered, and returns the failure.
func transact(ctx context.Context, producer *client.Producer, md client.ShareGroupMetadata, records []*kgo.Record, abortOnPurpose bool) error {
	if err := producer.BeginTransaction(); err != nil {
		return err
	}
	var outputs kgo.FirstErrPromise
	acks := client.NewShareAcknowledgements()
	for _, r := range records {
		producer.Produce(ctx, &kgo.Record{Key: r.Key, Value: []byte(strings.ToUpper(string(r.Value)))}, outputs.Promise())
		acks.Add(r, client.Accept) // applied if and only if the transaction commits
	}
	err := producer.SendShareAcknowledgementsToTransaction(ctx, acks, md)
	if ferr := producer.Flush(ctx); err == nil {
		err = ferr
	}
	if err == nil {
		err = outputs.Err()
	}
	if err == nil && abortOnPurpose {
		err = errors.New("aborting on purpose (--abort-every)")
	}
	if err == nil {
		err = producer.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			return nil // the proxy applies the acknowledgements; nothing more to do
		}
	}
	// Neither the outputs nor the acknowledgements take effect. (If the
	// commit itself failed with an unknown outcome, abort is still the
	// right call: kgo retries it safely.)
	if aerr := producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		err = fmt.Errorf("%w (and the abort: %v)", err, aerr)
	}
	client.ReleaseForRedelivery(records...) // needed when staging failed; always safe
	return err
}

// fatal: no later transaction of this producer can succeed.
func fatal(err error) bool {
	return errors.Is(err, client.ErrNotAdvertised) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed)
}
