package main

// The soak's churner: owners that come and go. Every cycle is a new share
// group, a new member in it and a new transactional id (padded to a few
// hundred bytes, so that an id kept too long shows in the heap), all through
// sidecar 1: the member acquires the churn topic's newest record, the
// transaction acknowledges it (every other cycle with an output record, in
// turn without: an acknowledgement-only transaction) and commits, then both
// clients close and are never seen again. What the sidecar learned of them
// (a member, a group's readers, a transaction) must be forgotten once its
// owner is gone; the soak's growth test judges those figures after the time
// the sidecar keeps them (soakMetric.KeptFor).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/client"
	"github.com/sharetx/sharetx/e2e/sim"
)

// ChurnResult is what the churner did.
type ChurnResult struct {
	Cycles    int      `json:"cycles"`
	Committed int      `json:"committed"`
	Failed    int      `json:"failed"`
	Errors    []string `json:"errors,omitempty"` // the first few failures
}

type churner struct {
	p         *phase
	every     time.Duration
	bootstrap string // sidecar 1
	in, out   string
	cycles    atomic.Int64
	committed atomic.Int64
	failed    atomic.Int64
	errs      []string // only the churn goroutine appends; read after it ends
}

const churnKeptErrors = 10

func newChurner(p *phase, every time.Duration) *churner {
	return &churner{p: p, every: every, bootstrap: p.proxy[0].bootstrap, in: p.in + "-churn", out: p.out + "-churn"}
}

func (c *churner) setup(ctx context.Context) error {
	for _, t := range []string{c.in, c.out} {
		if err := sim.CreateTopic(ctx, c.p.r.adm, t, 1, c.p.r.rf); err != nil {
			return err
		}
	}
	return nil
}

// run churns until ctx ends, one cycle at a time, at most one per c.every.
func (c *churner) run(ctx context.Context) {
	feeder, err := direct(c.p.r.o.Seeds, kgo.DefaultProduceTopic(c.in), kgo.ProducerLinger(0))
	if err != nil {
		c.p.fail("churner: %v", err)
		return
	}
	defer feeder.Close()
	for n := 1; ctx.Err() == nil; n++ {
		began := time.Now()
		c.cycles.Add(1)
		if err := c.cycle(ctx, feeder, n); err != nil && ctx.Err() == nil {
			c.failed.Add(1)
			if len(c.errs) < churnKeptErrors {
				c.errs = append(c.errs, fmt.Sprintf("%s cycle %d: %v", time.Since(c.p.t0).Round(time.Second), n, err))
			}
		} else if err == nil {
			c.committed.Add(1)
		}
		sleepCtx(ctx, c.every-time.Since(began))
	}
}

// cycle is one owner's life: a fresh group, member and transactional id.
func (c *churner) cycle(ctx context.Context, feeder *kgo.Client, n int) error {
	group := fmt.Sprintf("%s-churn-%06d", c.p.group, n)
	txnID := fmt.Sprintf("%s-churn-%06d-%s", c.p.group, n, strings.Repeat("x", 300))
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// A new share group starts at the partition's end (share.auto.offset.reset
	// latest): records are produced until the member has acquired one.
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap), kgo.ClientID("chaos-churn"), kgo.ShareGroup(group),
		kgo.ConsumeTopics(c.in), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := client.NewProducer(append([]kgo.Opt{kgo.SeedBrokers(c.bootstrap), kgo.ClientID("chaos-churn")},
		sim.TxnProducerOpts(txnID, 20*time.Second, c.out)...))
	if err != nil {
		return err
	}
	defer prod.Close()

	var recs []*kgo.Record
	for len(recs) == 0 {
		if err := feeder.ProduceSync(cctx, &kgo.Record{Value: []byte(group)}).FirstErr(); err != nil {
			return fmt.Errorf("producing the churn input: %w", err)
		}
		pctx, pcancel := context.WithTimeout(cctx, 2*time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		if cctx.Err() != nil {
			return fmt.Errorf("no churn record acquired in a minute: %w", cctx.Err())
		}
		for _, e := range fs.Errors() {
			if !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
				return fmt.Errorf("polling: %w", e.Err)
			}
		}
		recs = fs.Records()
	}

	if err := prod.BeginTransaction(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if n%2 == 0 {
		if err := prod.ProduceSync(cctx, &kgo.Record{Value: []byte(group)}).FirstErr(); err != nil {
			return c.abort(prod, fmt.Errorf("producing the output: %w", err))
		}
	}
	acks := client.NewShareAcknowledgements()
	for _, r := range recs {
		acks.Add(r, client.Accept)
	}
	if err := prod.SendShareAcknowledgementsToTransaction(cctx, acks, client.NewShareGroupMetadata(group)); err != nil {
		return c.abort(prod, fmt.Errorf("staging %d acknowledgements: %w", len(recs), err))
	}
	if err := prod.EndTransaction(cctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (c *churner) abort(prod *client.Producer, err error) error {
	actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if aerr := prod.EndTransaction(actx, kgo.TryAbort); aerr != nil {
		return fmt.Errorf("%w (and the abort: %v)", err, aerr)
	}
	return err
}

// result is what the churner did; call it after run returned.
func (c *churner) result() ChurnResult {
	return ChurnResult{Cycles: int(c.cycles.Load()), Committed: int(c.committed.Load()), Failed: int(c.failed.Load()), Errors: c.errs}
}
