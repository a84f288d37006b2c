package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sharetx/sharetx/kip1289"
)

// defaultShadowTopic is the topic the sharetx proxy stages transactional
// acknowledgements in (and that the producer touches, see package doc).
const defaultShadowTopic = "__sharetx_shadow"

// Producer is a transactional franz-go producer, connected through sharetx,
// that binds share-group acknowledgements to its transactions
// (SendShareAcknowledgementsToTransaction). It owns its kgo client, as
// kgo's GroupTransactSession does: build it with NewProducer, run the
// transaction with its methods (or those of Client), and Close it when done.
//
// Its methods are safe for concurrent use as far as kgo's are: one
// transaction at a time.
type Producer struct {
	cl          *kgo.Client
	txnID       string
	apiKey      int16
	shadowTopic string

	// produced is the producer id and epoch of the newest record this
	// producer produced successfully (see producedHook).
	produced atomic.Pointer[pidEpoch]

	touchMu sync.Mutex // serializes touches

	// callWritten gets a value when a TxnShareAcknowledge was written to
	// the connection (producedHook), so that a riding call flushes after.
	callWritten chan struct{}
	// unsent approximates the records buffered and not yet written in a
	// Produce (producedHook): a riding call needs a Produce still to come.
	unsent atomic.Int64

	// mu guards what the producer learned from the cluster, and owned.
	mu       sync.Mutex
	checked  bool // the cluster advertises the key
	tv2      bool // transaction version 2 is in use
	topicIDs map[string][16]byte
	shadowN  int32
	shadowAt time.Time
	owned    bool // a TransactionalShareAcknowledger runs the producer's transactions
}

type pidEpoch struct {
	id    int64
	epoch int16
}

// Opt is an option of NewProducer: a sharetx setting, given apart from the
// kgo options of the producer's client.
type Opt interface{ apply(*producerConfig) }

type opt func(*producerConfig)

func (o opt) apply(c *producerConfig) { o(c) }

type producerConfig struct {
	apiKey      int16
	shadowTopic string
	partitioner kgo.Partitioner
	versions    *kversion.Versions
}

// APIKey sets the API key of TxnShareAcknowledge; it must match the proxy's
// configuration. The default is 95 (kip1289.DefaultKey). Values <= 0 keep
// the default.
func APIKey(key int16) Opt {
	return opt(func(c *producerConfig) {
		if key > 0 {
			c.apiKey = key
		}
	})
}

// ShadowTopic sets the proxy's shadow topic (default "__sharetx_shadow"); it
// must match the proxy's configuration. An empty name keeps the default.
func ShadowTopic(topic string) Opt {
	return opt(func(c *producerConfig) {
		if topic != "" {
			c.shadowTopic = topic
		}
	})
}

// Partitioner sets the record partitioner of the producer's client for
// every topic but the shadow topic (default: kgo's default partitioner).
// NewProducer installs kgo.RecordPartitioner itself, to place the
// transaction's touch record on an exact shadow partition; pass your
// partitioner here, not with kgo.RecordPartitioner (NewProducer refuses
// that).
func Partitioner(p kgo.Partitioner) Opt {
	return opt(func(c *producerConfig) { c.partitioner = p })
}

// MaxVersions sets the version table the TxnShareAcknowledge key is added to
// (default kversion.Stable()). Pass your table here, not with
// kgo.MaxVersions, which would drop the key (NewProducer refuses that). The
// table is copied.
func MaxVersions(v *kversion.Versions) Opt {
	return opt(func(c *producerConfig) { c.versions = v })
}

// versionTable returns the kgo version table: the base table plus the
// TxnShareAcknowledge key at max version 0. kgo refuses to issue a request
// whose key is not in its table.
func (c *producerConfig) versionTable() *kversion.Versions {
	var vs *kversion.Versions
	if c.versions == nil {
		vs = kversion.Stable()
	} else {
		vs = new(kversion.Versions)
		c.versions.EachMaxKeyVersion(vs.SetMaxKeyVersion)
	}
	vs.SetMaxKeyVersion(c.apiKey, 0)
	return vs
}

// NewProducer builds a transactional producer through sharetx: a kgo client
// of kopts, which must name the proxy (kgo.SeedBrokers) and a transactional
// id (kgo.TransactionalID), and the sharetx settings opts. To kopts it adds
//
//   - kgo.MaxVersions with the TxnShareAcknowledge key (max version 0) added
//     to kversion.Stable() (or to the table of the MaxVersions option);
//   - kgo.RecordPartitioner wrapping kgo's default partitioner (or the one
//     of the Partitioner option) so the touch record lands on the exact
//     shadow partition it must;
//   - a produce hook (kgo.WithHooks) that notes when the current transaction
//     already holds a record, so SendShareAcknowledgementsToTransaction
//     needs no touch record (see package doc).
//
// It fails if kopts set no transactional id, kgo.RecordPartitioner, or
// kgo.MaxVersions with a table that lacks the key (use the Partitioner and
// MaxVersions options instead). Nothing is sent here: whether the cluster
// is reached through sharetx is found out by the first
// SendShareAcknowledgementsToTransaction (ErrNotAdvertised).
//
// The share consumer needs nothing of this package: a kgo client with
// kgo.ShareGroup, seeded with the proxy.
func NewProducer(kopts []kgo.Opt, opts ...Opt) (*Producer, error) {
	cfg := producerConfig{apiKey: kip1289.DefaultKey, shadowTopic: defaultShadowTopic}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.partitioner == nil {
		// kgo's default (config.go).
		cfg.partitioner = kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	}
	p := &Producer{apiKey: cfg.apiKey, shadowTopic: cfg.shadowTopic, topicIDs: make(map[string][16]byte), callWritten: make(chan struct{}, 1)}
	part := &touchPartitioner{shadowTopic: cfg.shadowTopic, others: cfg.partitioner}
	// Ours first: an option of kopts that replaces one of them shows, and
	// is refused below.
	all := append([]kgo.Opt{
		kgo.MaxVersions(cfg.versionTable()),
		kgo.RecordPartitioner(part),
		kgo.WithHooks(producedHook{p}),
	}, kopts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, err
	}
	if err := p.checkClient(cl, part); err != nil {
		cl.Close()
		return nil, err
	}
	p.cl = cl
	return p, nil
}

func (p *Producer) checkClient(cl *kgo.Client, part *touchPartitioner) error {
	p.txnID, _ = cl.OptValue(kgo.TransactionalID).(string)
	if p.txnID == "" {
		return errors.New("sharetx: the producer is not transactional (kgo.TransactionalID)")
	}
	if got, _ := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner); got != kgo.Partitioner(part) {
		return errors.New("sharetx: kgo.RecordPartitioner replaces the partitioner the producer needs for its touch record; use client.Partitioner")
	}
	if vs, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions); vs == nil || !vs.HasKey(p.apiKey) {
		return fmt.Errorf("sharetx: kgo.MaxVersions drops TxnShareAcknowledge (key %d) from the version table; use client.MaxVersions", p.apiKey)
	}
	return nil
}

// Client returns the producer's kgo client, for what Producer does not
// wrap (ProducerID, AbortBufferedRecords, metrics...). Do not close it
// apart from the Producer.
func (p *Producer) Client() *kgo.Client { return p.cl }

// Close closes the producer's kgo client (kgo.Client.Close).
func (p *Producer) Close() { p.cl.Close() }

// BeginTransaction begins a transaction (kgo.Client.BeginTransaction).
func (p *Producer) BeginTransaction() error { return p.cl.BeginTransaction() }

// EndTransaction commits or aborts the transaction
// (kgo.Client.EndTransaction): the proxy applies the acknowledgements sent
// to it if and only if it commits. Flush before committing.
func (p *Producer) EndTransaction(ctx context.Context, commit kgo.TransactionEndTry) error {
	return p.cl.EndTransaction(ctx, commit)
}

// Produce produces r asynchronously in the transaction (kgo.Client.Produce).
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.cl.Produce(ctx, r, promise)
}

// ProduceSync produces rs in the transaction and waits for them
// (kgo.Client.ProduceSync).
func (p *Producer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return p.cl.ProduceSync(ctx, rs...)
}

// Flush waits for the records buffered or in flight (kgo.Client.Flush).
func (p *Producer) Flush(ctx context.Context) error { return p.cl.Flush(ctx) }

// touchPartitioner partitions the shadow topic manually (Record.Partition)
// and delegates every other topic to the configured partitioner.
type touchPartitioner struct {
	shadowTopic string
	others      kgo.Partitioner
}

func (p *touchPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.shadowTopic {
		return manualTopicPartitioner{}
	}
	return p.others.ForTopic(topic)
}

type manualTopicPartitioner struct{}

// RequiresConsistency is true so kgo hands us all partitions in order (index
// == partition number), not only the writable ones.
func (manualTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }
func (manualTopicPartitioner) Partition(r *kgo.Record, _ int) int   { return int(r.Partition) }

// producedIn reports whether a record was produced successfully with this
// producer id and epoch. Under transaction version 2 every EndTxn bumps the
// epoch, so that means the current transaction holds a record and kgo's
// EndTransaction will send EndTxn. The touch record counts too.
func (p *Producer) producedIn(id int64, epoch int16) bool {
	e := p.produced.Load()
	return e != nil && e.id == id && e.epoch == epoch
}

// producedHook records the producer id and epoch of successfully produced
// records. kgo marks a partition added to the transaction on a successful
// produce response and calls this hook before the record's promise, so once
// a ProduceSync of (id, epoch) returned, producedIn(id, epoch) is true.
type producedHook struct{ p *Producer }

func (h producedHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == h.p.apiKey && err == nil {
		select {
		case h.p.callWritten <- struct{}{}:
		default:
		}
	}
}

func (h producedHook) OnProduceRecordBuffered(*kgo.Record) { h.p.unsent.Add(1) }

func (h producedHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.p.unsent.Add(-int64(m.NumRecords)) // a retried batch counts again: unsent() clamps
}

// toSend reports whether records are buffered that no Produce carried yet.
func (p *Producer) toSend() bool {
	if p.cl.BufferedProduceRecords() == 0 {
		p.unsent.Store(0)
		return false
	}
	return p.unsent.Load() > 0
}

func (h producedHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil || r.ProducerID < 0 || h.p.producedIn(r.ProducerID, r.ProducerEpoch) {
		return
	}
	h.p.produced.Store(&pidEpoch{id: r.ProducerID, epoch: r.ProducerEpoch})
}
