package client_test

import (
	"context"
	"errors"
	"log"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
)

// Consume-transform-produce: per poll, one transaction holds the outputs
// and the inputs' acknowledgements. The runnable program is
// examples/consume-transform-produce.
func ExampleProducer_SendShareAcknowledgementsToTransaction() {
	ctx := context.Background()
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092"), // the sharetx sidecar
		kgo.ShareGroup("orders-workers"),
		kgo.ConsumeTopics("orders"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	producer, err := client.NewProducer([]kgo.Opt{
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.TransactionalID("orders-worker-1"),
		kgo.DefaultProduceTopic("orders-upper"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	md := client.NewShareGroupMetadata("orders-workers")

	for {
		records := consumer.PollRecords(ctx, 100).Records()
		if len(records) == 0 {
			continue
		}
		if err := producer.BeginTransaction(); err != nil {
			log.Fatal(err)
		}
		var outputs kgo.FirstErrPromise
		acks := client.NewShareAcknowledgements()
		for _, r := range records {
			producer.Produce(ctx, &kgo.Record{Value: []byte(strings.ToUpper(string(r.Value)))}, outputs.Promise())
			acks.Add(r, client.Accept)
		}
		err := producer.SendShareAcknowledgementsToTransaction(ctx, acks, md) // while the outputs are in flight
		if ferr := producer.Flush(ctx); err == nil {
			err = ferr
		}
		if err == nil {
			err = outputs.Err()
		}
		if err == nil {
			err = producer.EndTransaction(ctx, kgo.TryCommit)
		}
		if err != nil {
			if aerr := producer.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
				log.Printf("abort: %v", aerr)
			}
			client.ReleaseForRedelivery(records...) // they come back, to this member or another
		}
	}
}

// An application without Kafka output commits the acknowledgements of what
// it made durable elsewhere in transactions of their own. The runnable
// program is examples/checkpoint-sink.
func ExampleTransactionalShareAcknowledger() {
	ctx := context.Background()
	consumer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.ShareGroup("events-sink"), kgo.ConsumeTopics("events"))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	producer, err := client.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092"), kgo.TransactionalID("events-sink-1")})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	acker, err := client.NewTransactionalShareAcknowledger(producer, client.NewShareGroupMetadata("events-sink"))
	if err != nil {
		log.Fatal(err)
	}
	defer acker.Close(ctx) // aborts what is not committed, releases its records

	for {
		records := consumer.PollRecords(ctx, 100).Records()
		if err := writeDurably(records); err != nil { // your sink, a database, a checkpoint
			client.ReleaseForRedelivery(records...)
			continue
		}
		if err := acker.AcknowledgeAll(records, client.Accept); err != nil {
			log.Fatal(err)
		}
		// Commit before polling again; a retriable failure kept everything:
		// commit again.
		err := acker.Commit(ctx)
		for errors.Is(err, client.ErrRetriable) {
			time.Sleep(time.Second)
			err = acker.Commit(ctx)
		}
		if errors.Is(err, client.ErrTerminal) {
			log.Fatal(err) // fenced by a newer instance, or no sidecar
		}
		if err != nil {
			acker.Abort(ctx) // some were refused: drop the rest too, they come back
		}
	}
}

func writeDurably([]*kgo.Record) error { return nil }
