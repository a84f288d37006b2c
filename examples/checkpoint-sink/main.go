// Command checkpoint-sink is a share-group pipeline whose effects are not
// Kafka records, in Go: it writes what it consumes to a local file (the
// "sink") and, at each checkpoint, once the sink has made the records
// durable, commits their acknowledgements in a transaction of their own with
// client.TransactionalShareAcknowledger. A failed checkpoint commits
// nothing: the records are delivered again, and the sink, which skips the
// records it already holds, writes each once.
//
//	go run ./cmd/sharetx     # terminal 1: the sidecar with its embedded cluster, 127.0.0.1:9092
//	go run ./examples/checkpoint-sink --sink /tmp/sink.txt --seed 1000 --max-records 1000 --fail-every 4
//
// One line per record in the sink: topic/partition/offset<TAB>value. Ctrl-C
// stops it after the current checkpoint.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/examples/internal/exampleutil"
)

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "the sidecar (go run ./cmd/sharetx)")
	group := flag.String("group", "sink-example", "share group")
	input := flag.String("input", "events", "input topic")
	txnID := flag.String("txn-id", "sink-example-1", "transactional id of the acknowledger (one per instance)")
	sinkPath := flag.String("sink", "sink.txt", "the sink file (appended to)")
	maxRecords := flag.Int("max-records", 0, "stop once that many records are acknowledged (0: no limit)")
	maxSeconds := flag.Int("max-seconds", 0, "stop after that many seconds (0: no limit)")
	maxPoll := flag.Int("max-poll", 500, "records per poll, and so per checkpoint")
	seed := flag.Int("seed", 0, "create the topic and produce that many records first")
	failEvery := flag.Int("fail-every", 0, "fail every n-th checkpoint after the sink wrote, before the commit, to watch the records come back")
	flag.Parse()

	ctx, stop := exampleutil.Interruptible()
	defer stop()
	if *maxSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*maxSeconds)*time.Second)
		defer cancel()
	}
	if *seed > 0 {
		if err := exampleutil.Seed(ctx, *bootstrap, *group, *input, "event", *seed); err != nil {
			fmt.Println("seed:", err)
			os.Exit(1)
		}
	}
	sink, err := openSink(*sinkPath)
	if err != nil {
		fmt.Println("sink:", err)
		os.Exit(1)
	}
	defer sink.Close()

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
	// The acknowledger runs its own transactions, on a producer dedicated to it.
	producer, err := client.NewProducer([]kgo.Opt{kgo.SeedBrokers(*bootstrap), kgo.TransactionalID(*txnID)})
	if err != nil {
		fmt.Println("producer:", err)
		os.Exit(1)
	}
	acker, err := client.NewTransactionalShareAcknowledger(producer, client.NewShareGroupMetadata(*group))
	if err != nil {
		fmt.Println("acknowledger:", err)
		os.Exit(1)
	}

	var in, written, acked, checkpoints, failed int
	start, lastReport := time.Now(), time.Now()
	status := 0
	fmt.Printf("consuming %s as share group %s into %s (%d records already there), acknowledging in transactions of %s\n",
		*input, *group, *sinkPath, len(sink.held), *txnID)
	for *maxRecords == 0 || acked < *maxRecords {
		if time.Since(lastReport) >= 2*time.Second {
			fmt.Printf("progress: in=%d written=%d acked=%d checkpoints=%d failed=%d\n", in, written, acked, checkpoints, failed)
			lastReport = time.Now()
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		records := consumer.PollRecords(pctx, *maxPoll).Records()
		cancel()
		if ctx.Err() != nil {
			break
		}
		if len(records) == 0 {
			continue
		}
		in += len(records)

		// A checkpoint per poll (stage or commit before polling again: the
		// next poll would acknowledge these records implicitly).
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := checkpoint(cctx, acker, sink, records, &written, *failEvery > 0 && (checkpoints+failed+1)%*failEvery == 0)
		cancel()
		switch {
		case err == nil:
			checkpoints++
			acked += len(records)
		case errors.Is(err, client.ErrTerminal):
			fmt.Println("stopping:", err) // fenced by another instance, or no sidecar
			status = 1
		default:
			failed++
			fmt.Printf("checkpoint of %d records failed: %v\n", len(records), err)
		}
		if status != 0 {
			break
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	acker.Close(cctx) // aborts what is not committed, releases its records
	cancel()
	producer.Close()
	consumer.Close()
	fmt.Printf("summary: in=%d written=%d acked=%d checkpoints=%d failed=%d sink=%d (%.1f s)\n",
		in, written, acked, checkpoints, failed, len(sink.held), time.Since(start).Seconds())
	os.Exit(status)
}

// checkpoint makes the records' effects durable (1), then commits their
// acknowledgements (2). On failure nothing is acknowledged: the records are
// released and come back.
func checkpoint(ctx context.Context, acker *client.TransactionalShareAcknowledger, sink *fileSink, records []*kgo.Record, written *int, failOnPurpose bool) error {
	n, err := sink.write(records) // 1.
	*written += n
	if err == nil && failOnPurpose {
		err = errors.New("failing this checkpoint on purpose (--fail-every)")
	}
	if err != nil {
		client.ReleaseForRedelivery(records...)
		return err
	}
	if err := acker.AcknowledgeAll(records, client.Accept); err != nil {
		client.ReleaseForRedelivery(records...)
		return err
	}
	// 2. Commit stages the buffer through the sidecar and commits. A
	// retriable failure keeps every acknowledgement buffered: commit again.
	for attempt := 1; ; attempt++ {
		err = acker.Commit(ctx)
		if err == nil || !errors.Is(err, client.ErrRetriable) || attempt == 3 {
			break
		}
		fmt.Printf("checkpoint of %d records: retrying its commit: %v\n", len(records), err)
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, client.ErrTerminal) {
		// Drop what is still buffered and release the records (the
		// ones the proxy refused, ErrRejected, are released already).
		if aerr := acker.Abort(ctx); aerr != nil {
			err = fmt.Errorf("%w (and the abort: %v)", err, aerr)
		}
	}
	return err
}

// fileSink appends one line per record and syncs the file. It is idempotent,
// because a record may come back after a checkpoint that failed once the sink
// had written it (or after a crash in between): it skips the records
// (topic/partition/offset) it holds already.
type fileSink struct {
	f    *os.File
	held map[string]bool
}

func openSink(path string) (*fileSink, error) {
	s := &fileSink{held: map[string]bool{}}
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, _, _ := strings.Cut(sc.Text(), "\t")
			s.held[id] = true
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.f = f
	return s, nil
}

// write writes the records it does not hold yet and syncs; it returns how
// many it wrote.
func (s *fileSink) write(records []*kgo.Record) (int, error) {
	var b strings.Builder
	var ids []string
	for _, r := range records {
		id := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		if !s.held[id] {
			ids = append(ids, id)
			fmt.Fprintf(&b, "%s\t%s\n", id, r.Value)
		}
	}
	if _, err := s.f.WriteString(b.String()); err != nil {
		return 0, err
	}
	if err := s.f.Sync(); err != nil {
		return 0, err
	}
	for _, id := range ids {
		s.held[id] = true
	}
	return len(ids), nil
}

func (s *fileSink) Close() error { return s.f.Close() }
