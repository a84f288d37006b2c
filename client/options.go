package client

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sharetx/sharetx/kip1289"
)

// DefaultShadowTopic is the topic the sharetx proxy stages transactional
// acknowledgements in (and that the client touches, see package doc).
const DefaultShadowTopic = "__sharetx_shadow"

// config is the sharetx configuration of one set of ClientOpts. It travels
// with the client inside the record partitioner ClientOpts installs, which is
// how SendShareAcknowledgementsToTransaction finds it again.
type config struct {
	apiKey      int16
	shadowTopic string
	partitioner kgo.Partitioner
	versions    *kversion.Versions

	// produced: per producer id, the epoch of the newest record a client
	// with these options produced successfully (see producedHook). last is
	// the newest entry, so the hook takes the lock only when it changes.
	producedMu sync.Mutex
	produced   map[int64]int16
	last       atomic.Pointer[pidEpoch]
}

type pidEpoch struct {
	id    int64
	epoch int16
}

// maxProduced bounds the produced map (one entry per producer id sharing
// these options); when full it is emptied, which costs at most a touch.
const maxProduced = 1024

// producedIn reports whether a record was produced successfully with this
// producer id and epoch. Under transaction version 2 every EndTxn bumps the
// epoch, so that means the current transaction holds a record and kgo's
// EndTransaction will send EndTxn. The touch record counts too.
func (c *config) producedIn(id int64, epoch int16) bool {
	c.producedMu.Lock()
	defer c.producedMu.Unlock()
	e, ok := c.produced[id]
	return ok && e == epoch
}

// producedHook records the producer id and epoch of successfully produced
// records. kgo marks a partition added to the transaction on a successful
// produce response and calls this hook before the record's promise, so once
// a ProduceSync of (id, epoch) returned, producedIn(id, epoch) is true.
type producedHook struct{ cfg *config }

func (h producedHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil || r.ProducerID < 0 {
		return
	}
	c := h.cfg
	if p := c.last.Load(); p != nil && p.id == r.ProducerID && p.epoch == r.ProducerEpoch {
		return
	}
	c.producedMu.Lock()
	if c.produced == nil || len(c.produced) >= maxProduced {
		c.produced = map[int64]int16{}
	}
	c.produced[r.ProducerID] = r.ProducerEpoch
	c.producedMu.Unlock()
	c.last.Store(&pidEpoch{id: r.ProducerID, epoch: r.ProducerEpoch})
}

// Option configures ClientOpts.
type Option func(*config)

// APIKey sets the API key of TxnShareAcknowledge; it must match the proxy's
// configuration. The default is 95 (kip1289.DefaultKey).
// Values <= 0 keep the default.
func APIKey(key int16) Option {
	return func(c *config) {
		if key > 0 {
			c.apiKey = key
		}
	}
}

// ShadowTopic sets the proxy's shadow topic (default "__sharetx_shadow"); it
// must match the proxy's configuration. An empty name keeps the default.
func ShadowTopic(topic string) Option {
	return func(c *config) {
		if topic != "" {
			c.shadowTopic = topic
		}
	}
}

// Partitioner sets the record partitioner of the client. ClientOpts installs
// kgo.RecordPartitioner itself (it must place the transaction's touch record
// on an exact shadow partition); pass your own partitioner here instead of
// with kgo.RecordPartitioner, which would override it. The default is kgo's
// default partitioner. It is used for every topic but the shadow topic.
func Partitioner(p kgo.Partitioner) Option {
	return func(c *config) { c.partitioner = p }
}

// MaxVersions sets the version table the TxnShareAcknowledge key is added to
// (default kversion.Stable()). Pass your table here instead of with
// kgo.MaxVersions, which would drop the key. The table is copied.
func MaxVersions(v *kversion.Versions) Option {
	return func(c *config) { c.versions = v }
}

func newConfig(opts []Option) *config {
	c := &config{
		apiKey:      kip1289.DefaultKey,
		shadowTopic: DefaultShadowTopic,
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.partitioner == nil {
		// kgo's default (config.go).
		c.partitioner = kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	}
	return c
}

// versionTable returns the kgo version table: the base table plus the
// TxnShareAcknowledge key at max version 0. kgo refuses to issue a request
// whose key is not in its table.
func (c *config) versionTable() *kversion.Versions {
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

// ClientOpts returns the kgo options a franz-go client needs to use sharetx:
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
// Append them after your own options, and do not pass kgo.MaxVersions or
// kgo.RecordPartitioner after them (use this package's MaxVersions and
// Partitioner options). Use them for both the transactional producer and the
// share consumer, and point kgo.SeedBrokers at the proxy.
func ClientOpts(opts ...Option) []kgo.Opt {
	c := newConfig(opts)
	return []kgo.Opt{
		kgo.MaxVersions(c.versionTable()),
		kgo.RecordPartitioner(&sharetxPartitioner{cfg: c}),
		kgo.WithHooks(producedHook{cfg: c}),
	}
}

// sharetxPartitioner partitions the shadow topic manually (Record.Partition)
// and delegates every other topic to the configured partitioner.
type sharetxPartitioner struct {
	cfg *config
}

func (p *sharetxPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.cfg.shadowTopic {
		return manualTopicPartitioner{}
	}
	return p.cfg.partitioner.ForTopic(topic)
}

type manualTopicPartitioner struct{}

// RequiresConsistency is true so kgo hands us all partitions in order (index
// == partition number), not only the writable ones.
func (manualTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }
func (manualTopicPartitioner) Partition(r *kgo.Record, _ int) int   { return int(r.Partition) }

// configOf returns the sharetx configuration of a client built with
// ClientOpts, or nil.
func configOf(cl *kgo.Client) *config {
	p, _ := cl.OptValue(kgo.RecordPartitioner).(*sharetxPartitioner)
	if p == nil {
		return nil
	}
	return p.cfg
}
