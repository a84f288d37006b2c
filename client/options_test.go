package client

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

func TestOptionDefaults(t *testing.T) {
	c := newConfig(nil)
	if c.apiKey != 95 || c.shadowTopic != "__sharetx_shadow" || c.partitioner == nil {
		t.Fatalf("%+v", c)
	}
	c = newConfig([]Option{APIKey(120), ShadowTopic("shadow"), nil})
	if c.apiKey != 120 || c.shadowTopic != "shadow" {
		t.Fatalf("%+v", c)
	}
	c = newConfig([]Option{APIKey(120), APIKey(0), APIKey(-3), ShadowTopic("s"), ShadowTopic("")})
	if c.apiKey != 120 || c.shadowTopic != "s" {
		t.Fatalf("invalid values must keep the previous ones: %+v", c)
	}
}

func TestVersionTable(t *testing.T) {
	vs := newConfig(nil).versionTable()
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
	vs = newConfig([]Option{MaxVersions(base), APIKey(101)}).versionTable()
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
	p := &sharetxPartitioner{cfg: newConfig([]Option{ShadowTopic("sh"), Partitioner(fixedPartitioner{7})})}
	sh := p.ForTopic("sh")
	if !sh.RequiresConsistency(&kgo.Record{}) || sh.Partition(&kgo.Record{Partition: 2}, 5) != 2 {
		t.Fatal("shadow topic must be partitioned manually")
	}
	if got := p.ForTopic("other").Partition(&kgo.Record{Partition: 2}, 9); got != 7 {
		t.Fatalf("other topic: %d, want the configured partitioner's 7", got)
	}
	// Default partitioner for other topics.
	if _, ok := (&sharetxPartitioner{cfg: newConfig(nil)}).ForTopic("x").(manualTopicPartitioner); ok {
		t.Fatal("non-shadow topics must not be manual")
	}
}

// TestClientOptsOnClient builds real kgo clients against kfake and checks
// what kgo sees: the key in its version table and our partitioner.
func TestClientOptsOnClient(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, ClientOpts(APIKey(97), ShadowTopic("sh"))...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	vs, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions)
	if v, ok := vs.LookupMaxKeyVersion(97); !ok || v != 0 {
		t.Fatalf("client version table lacks key 97: %v %v", v, ok)
	}
	cfg := configOf(cl)
	if cfg == nil || cfg.apiKey != 97 || cfg.shadowTopic != "sh" {
		t.Fatalf("configOf: %+v", cfg)
	}

	plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if configOf(plain) != nil {
		t.Fatal("configOf on a plain client")
	}
	if vs, _ := plain.OptValue(kgo.MaxVersions).(*kversion.Versions); vs.HasKey(95) {
		t.Fatal("stable table has key 95?")
	}
}
