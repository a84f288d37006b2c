package client

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

func newConfig(opts ...Opt) producerConfig {
	c := producerConfig{apiKey: 95, shadowTopic: defaultShadowTopic}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

func TestOptionDefaults(t *testing.T) {
	c := newConfig(APIKey(120), ShadowTopic("shadow"), nil)
	if c.apiKey != 120 || c.shadowTopic != "shadow" {
		t.Fatalf("%+v", c)
	}
	c = newConfig(APIKey(120), APIKey(0), APIKey(-3), ShadowTopic("s"), ShadowTopic(""))
	if c.apiKey != 120 || c.shadowTopic != "s" {
		t.Fatalf("invalid values must keep the previous ones: %+v", c)
	}
}

func TestVersionTable(t *testing.T) {
	cfg := newConfig()
	vs := cfg.versionTable()
	if v, ok := vs.LookupMaxKeyVersion(95); !ok || v != 0 {
		t.Fatalf("key 95: %d %v", v, ok)
	}
	stable := kversion.Stable()
	stable.EachMaxKeyVersion(func(k, v int16) {
		if got, _ := vs.LookupMaxKeyVersion(k); got != v {
			t.Errorf("key %d: %d, want %d", k, got, v)
		}
	})

	base := kversion.V3_9_0()
	cfg = newConfig(MaxVersions(base), APIKey(101))
	vs = cfg.versionTable()
	if v, ok := vs.LookupMaxKeyVersion(101); !ok || v != 0 {
		t.Fatalf("key 101: %d %v", v, ok)
	}
	if vs.HasKey(95) {
		t.Fatal("key 95 must not be set with APIKey(101)")
	}
	if base.HasKey(101) {
		t.Fatal("the MaxVersions table must be copied, not modified")
	}
	if got, _ := vs.LookupMaxKeyVersion(int16(kmsg.Produce)); got != 11 {
		t.Fatalf("produce from 3.9 base: %d", got)
	}
}

type fixedPartitioner struct{ p int }

func (f fixedPartitioner) ForTopic(string) kgo.TopicPartitioner { return f }
func (fixedPartitioner) RequiresConsistency(*kgo.Record) bool   { return false }
func (f fixedPartitioner) Partition(*kgo.Record, int) int       { return f.p }

func TestPartitionerRouting(t *testing.T) {
	p := &touchPartitioner{shadowTopic: "sh", others: fixedPartitioner{7}}
	sh := p.ForTopic("sh")
	if !sh.RequiresConsistency(&kgo.Record{}) || sh.Partition(&kgo.Record{Partition: 2}, 5) != 2 {
		t.Fatal("shadow topic must be partitioned manually")
	}
	if got := p.ForTopic("other").Partition(&kgo.Record{Partition: 2}, 9); got != 7 {
		t.Fatalf("other topic: %d, want the configured partitioner's 7", got)
	}
}

// TestNewProducer builds producers against kfake and checks what kgo sees:
// the key in its version table, the producer's partitioner (wrapping the
// Partitioner option's), and the refusals.
func TestNewProducer(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)

	p, err := NewProducer([]kgo.Opt{seeds, kgo.TransactionalID("tx")}, APIKey(97), ShadowTopic("sh"), Partitioner(fixedPartitioner{3}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	vs, _ := p.Client().OptValue(kgo.MaxVersions).(*kversion.Versions)
	if v, ok := vs.LookupMaxKeyVersion(97); !ok || v != 0 {
		t.Fatalf("client version table lacks key 97: %v %v", v, ok)
	}
	part, _ := p.Client().OptValue(kgo.RecordPartitioner).(*touchPartitioner)
	if part == nil || part.shadowTopic != "sh" || part.others != (fixedPartitioner{3}) {
		t.Fatalf("partitioner %+v", part)
	}
	if p.apiKey != 97 || p.shadowTopic != "sh" || p.txnID != "tx" {
		t.Fatalf("producer %+v", p)
	}
	def, err := NewProducer([]kgo.Opt{seeds, kgo.TransactionalID("tx2")})
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if def.apiKey != 95 || def.shadowTopic != "__sharetx_shadow" {
		t.Fatalf("defaults: %+v", def)
	}
	if _, ok := def.Client().OptValue(kgo.RecordPartitioner).(*touchPartitioner).ForTopic("x").(manualTopicPartitioner); ok {
		t.Fatal("non-shadow topics must not be manual")
	}

	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want string
	}{
		{"not transactional", []kgo.Opt{seeds}, "not transactional (kgo.TransactionalID)"},
		{"kgo.MaxVersions", []kgo.Opt{seeds, kgo.TransactionalID("x"), kgo.MaxVersions(kversion.Stable())}, "drops TxnShareAcknowledge (key 95)"},
		{"kgo.RecordPartitioner", []kgo.Opt{seeds, kgo.TransactionalID("x"), kgo.RecordPartitioner(kgo.ManualPartitioner())}, "client.Partitioner"},
		{"kgo refuses", []kgo.Opt{seeds, kgo.TransactionalID("x"), kgo.RequiredAcks(kgo.LeaderAck())}, "acks"},
	} {
		if p, err := NewProducer(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			if p != nil {
				p.Close()
			}
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	withKey := kversion.Stable()
	withKey.SetMaxKeyVersion(95, 0)
	ok, err := NewProducer([]kgo.Opt{seeds, kgo.TransactionalID("x"), kgo.MaxVersions(withKey)})
	if err != nil {
		t.Fatalf("kgo.MaxVersions with the key: %v", err)
	}
	ok.Close()
}
