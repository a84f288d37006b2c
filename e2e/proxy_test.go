package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sharetx/sharetx/e2e/sim"
	"github.com/sharetx/sharetx/kip1289"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates a topic through the proxy with replication that fits
// the backend.
func createTopic(t testing.TB, adm *kadm.Client, b *Backend, partitions int32) string {
	t.Helper()
	topic := Unique("sharetx-e2e")
	rf := int16(1)
	if b.Nodes >= 3 {
		rf = 3
	}
	resp, err := adm.CreateTopic(ctxT(t, 30*time.Second), partitions, rf, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	// A new topic reaches every broker's metadata a moment later.
	Wait(t, 30*time.Second, "topic "+topic+" to have a leader for every partition", func() bool {
		md, err := adm.Metadata(ctxT(t, 10*time.Second), topic)
		if err != nil {
			return false
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) != int(partitions) {
			return false
		}
		for _, p := range td.Partitions {
			if p.Leader < 0 || p.Err != nil {
				return false
			}
		}
		return true
	})
	return topic
}

func produceN(t testing.TB, cl *kgo.Client, topic string, n int) {
	t.Helper()
	var failed atomic.Value
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf("value-%d", i))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(err)
				}
			})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// TestProduceConsumeClassicGroup: plain produce and a classic consumer group
// through the proxy; every record comes back once and every address the
// clients dialed is the proxy's.
func TestProduceConsumeClassicGroup(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		cl := p.NewClient(t, rec)
		adm := kadm.NewClient(cl)
		topic := createTopic(t, adm, b, 3)
		const n = 2000
		produceN(t, cl, topic, n)

		cons := p.NewClient(t, rec, kgo.ConsumerGroup(Unique("cg")), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		seen := map[string]int{}
		ctx := ctxT(t, 60*time.Second)
		for len(seen) < n {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d before timing out", len(seen), n)
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Errorf("fetch error: %v", err) })
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++ })
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("key %s consumed %d times", k, c)
			}
		}
		if err := cons.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		rec.AssertOnlyProxy(t, p)
	})
}

// TestTransactionalReadCommitted: transaction version 2 through the proxy;
// a read_committed consumer sees the committed transaction only.
func TestTransactionalReadCommitted(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		adm := kadm.NewClient(p.NewClient(t, rec))
		topic := createTopic(t, adm, b, 2)

		txn := p.NewClient(t, rec, kgo.TransactionalID(Unique("txn")), kgo.DefaultProduceTopic(topic))
		ctx := ctxT(t, 60*time.Second)
		run := func(prefix string, n int, commit bool) {
			if err := txn.BeginTransaction(); err != nil {
				t.Fatalf("begin: %v", err)
			}
			for i := 0; i < n; i++ {
				if err := txn.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%s-%d", prefix, i))).FirstErr(); err != nil {
					t.Fatalf("produce in txn: %v", err)
				}
			}
			if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("end txn (commit=%v): %v", commit, err)
			}
		}
		run("committed", 100, true)
		run("aborted", 50, false)
		run("committed2", 25, true)

		cons := p.NewClient(t, rec, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		for got < 125 {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d of 125 committed records before timing out", got)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if len(r.Value) >= 7 && string(r.Value[:7]) == "aborted" {
					t.Errorf("read_committed consumer saw aborted record %s", r.Value)
				}
				got++
			})
		}
		// Nothing more arrives: the aborted batch stays invisible.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) { t.Errorf("unexpected extra record %s", r.Value) })
		if got != 125 {
			t.Fatalf("read %d committed records, want 125", got)
		}
		rec.AssertOnlyProxy(t, p)
	})
}

// TestTransactionsAddingPartitionsThemselves: a producer of transaction
// version 1 (franz-go capped at Kafka 3.9's versions, as librdkafka) adds
// its partitions with AddPartitionsToTxn, which the proxy sends on the
// client's connection itself so that it can ask again while the coordinator
// answers CONCURRENT_TRANSACTIONS (kip1289.concurrent_transactions_retry,
// docs/design.md §5.4). Back-to-back transactions, committed and aborted,
// each one's first write meeting the previous one's markers: every
// committed record is read once, no aborted one, and every AddPartitionsToTxn
// went through the proxy's path.
func TestTransactionsAddingPartitionsThemselves(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		adm := kadm.NewClient(p.NewClient(t, rec))
		topic := createTopic(t, adm, b, 2)
		before := metricValue(p, "sharetx_injected_requests_total")

		var adds atomic.Int64
		txn := p.NewClient(t, rec, kgo.TransactionalID(Unique("txn-v1")), kgo.DefaultProduceTopic(topic),
			kgo.MaxVersions(kversion.V3_9_0()), kgo.WithHooks(addPartitionsCounter{&adds}))
		ctx := ctxT(t, 120*time.Second)
		const txns, per = 30, 4
		want := 0
		for i := 0; i < txns; i++ {
			commit := i%5 != 4
			if err := txn.BeginTransaction(); err != nil {
				t.Fatalf("begin: %v", err)
			}
			for j := 0; j < per; j++ {
				r := &kgo.Record{Partition: int32(j % 2), Value: []byte(fmt.Sprintf("%v-%d-%d", commit, i, j))}
				if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("transaction %d: produce: %v", i, err)
				}
			}
			if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("transaction %d: end (commit=%v): %v", i, commit, err)
			}
			if commit {
				want += per
			}
		}
		if adds.Load() < txns {
			t.Fatalf("the client sent %d AddPartitionsToTxn for %d transactions: it did not add its partitions itself", adds.Load(), txns)
		}
		if got := metricValue(p, "sharetx_injected_requests_total") - before; got < float64(adds.Load()) {
			t.Errorf("the proxy sent %v requests of its own on the clients' connections, want at least the %d AddPartitionsToTxn", got, adds.Load())
		}
		t.Logf("%d AddPartitionsToTxn; CONCURRENT_TRANSACTIONS asked again: %v, passed on: %v", adds.Load(),
			firstValue(labelledValue(p, "sharetx_concurrent_transactions_retries_total", "outcome", "answered")),
			firstValue(labelledValue(p, "sharetx_concurrent_transactions_retries_total", "outcome", "passed_on")))

		cons := p.NewClient(t, rec, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		seen := map[string]bool{}
		for len(seen) < want {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d committed records before timing out", len(seen), want)
			}
			fs.EachRecord(func(r *kgo.Record) {
				v := string(r.Value)
				if strings.HasPrefix(v, "false") {
					t.Errorf("read_committed consumer saw aborted record %s", v)
				}
				if seen[v] {
					t.Errorf("record %s read twice", v)
				}
				seen[v] = true
			})
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) { t.Errorf("unexpected extra record %s", r.Value) })
		rec.AssertOnlyProxy(t, p)
	})
}

func firstValue(v float64, _ bool) float64 { return v }

// addPartitionsCounter counts the client's AddPartitionsToTxn requests.
type addPartitionsCounter struct{ n *atomic.Int64 }

func (h addPartitionsCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.AddPartitionsToTxn.Int16() && err == nil {
		h.n.Add(1)
	}
}

func setShareAutoOffsetReset(t testing.TB, cl *kgo.Client, group string) {
	t.Helper()
	if err := sim.AlterConfigs(ctxT(t, 30*time.Second), cl, kmsg.ConfigResourceTypeGroupConfig, group, map[string]string{"share.auto.offset.reset": "earliest"}); err != nil {
		t.Fatal(err)
	}
}

// shareLag returns the share-group lag (records not yet acknowledged,
// KIP-1226) of every partition of topic in group; -1 where unknown. The
// share-partition start offset itself may stay behind acknowledged records
// on a real broker (it advances lazily), so completeness is judged by lag.
func shareLag(t testing.TB, cl *kgo.Client, group, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	tp := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	tp.Topic = topic
	for i := int32(0); i < partitions; i++ {
		tp.Partitions = append(tp.Partitions, i)
	}
	g.Topics = append(g.Topics, tp)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
	if err != nil {
		t.Fatalf("describe share group offsets: %v", err)
	}
	out := map[int32]int64{}
	for _, g := range resp.Groups {
		for _, tp := range g.Topics {
			for _, p := range tp.Partitions {
				out[p.Partition] = p.Lag
			}
		}
	}
	return out
}

// TestShareGroupConsume: a share group consuming and acknowledging through
// the proxy; every record is delivered, and once acknowledged the group has
// no lag left.
func TestShareGroupConsume(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		cl := p.NewClient(t, rec)
		adm := kadm.NewClient(cl)
		topic := createTopic(t, adm, b, 2)
		const n = 500
		produceN(t, cl, topic, n)
		group := Unique("share")
		setShareAutoOffsetReset(t, cl, group)

		share := p.NewClient(t, rec, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
		seen := map[string]bool{}
		ctx := ctxT(t, 90*time.Second)
		for len(seen) < n {
			fs := share.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("share consumer got %d of %d records before timing out", len(seen), n)
			}
			fs.EachRecord(func(r *kgo.Record) {
				seen[string(r.Key)] = true
				r.Ack(kgo.AckAccept)
			})
		}
		if err := share.FlushAcks(ctx); err != nil {
			t.Fatalf("flush acks: %v", err)
		}
		Wait(t, 30*time.Second, "the share group's lag to reach 0 on every partition", func() bool {
			lags := shareLag(t, cl, group, topic, 2)
			return len(lags) == 2 && lags[0] == 0 && lags[1] == 0
		})
		rec.AssertOnlyProxy(t, p)
	})
}

// TestAdminCalls: admin requests through the proxy; every broker address
// they return is a proxy address.
func TestAdminCalls(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		rec := &DialRecorder{}
		cl := p.NewClient(t, rec)
		adm := kadm.NewClient(cl)
		ctx := ctxT(t, 60*time.Second)
		allowed := p.ProxyAddrs()

		topic := createTopic(t, adm, b, 4)
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatalf("metadata: %v", err)
		}
		if len(md.Brokers) == 0 {
			t.Fatal("metadata names no brokers")
		}
		for _, br := range md.Brokers {
			if a := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))); !allowed[a] {
				t.Errorf("Metadata names broker %d at %s, not a proxy address", br.NodeID, a)
			}
		}
		if got := len(md.Topics[topic].Partitions); got != 4 {
			t.Errorf("topic has %d partitions, want 4", got)
		}

		dc := kmsg.NewPtrDescribeClusterRequest()
		dresp, err := dc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("describe cluster: %v", err)
		}
		for _, br := range dresp.Brokers {
			if a := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))); !allowed[a] {
				t.Errorf("DescribeCluster names broker %d at %s, not a proxy address", br.NodeID, a)
			}
		}

		// FindCoordinator, v3 (single key) and v4+ (batched keys).
		for _, v := range []int16{3, 4} {
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.Version = v
			fc.CoordinatorKey = "g1"
			fc.CoordinatorKeys = []string{"g1", "g2", "g3"}
			// Raw, so the version is exactly v (kgo would pick its own). A
			// fresh broker answers COORDINATOR_NOT_AVAILABLE while it creates
			// __consumer_offsets: retry that, as clients do.
			var fresp *kmsg.FindCoordinatorResponse
			Wait(t, 60*time.Second, "the group coordinator", func() bool {
				fresp = rawRoundTrip(t, p.Addr, fc).(*kmsg.FindCoordinatorResponse)
				retry := fresp.ErrorCode == kerr.CoordinatorNotAvailable.Code
				for _, c := range fresp.Coordinators {
					retry = retry || c.ErrorCode == kerr.CoordinatorNotAvailable.Code
				}
				if retry {
					time.Sleep(500 * time.Millisecond)
				}
				return !retry
			})
			check := func(node int32, host string, port int32) {
				if node < 0 {
					return
				}
				if a := net.JoinHostPort(host, strconv.Itoa(int(port))); !allowed[a] {
					t.Errorf("FindCoordinator v%d names %s, not a proxy address", v, a)
				}
			}
			if v < 4 {
				if fresp.ErrorCode != 0 {
					t.Fatalf("find coordinator v3: %v", kerr.ErrorForCode(fresp.ErrorCode))
				}
				check(fresp.NodeID, fresp.Host, fresp.Port)
			} else {
				if len(fresp.Coordinators) != 3 {
					t.Fatalf("batched find coordinator answered %d keys, want 3", len(fresp.Coordinators))
				}
				for _, c := range fresp.Coordinators {
					if c.ErrorCode != 0 {
						t.Fatalf("find coordinator %s: %v", c.Key, kerr.ErrorForCode(c.ErrorCode))
					}
					check(c.NodeID, c.Host, c.Port)
				}
			}
		}

		if _, err := adm.ListGroups(ctx); err != nil {
			t.Fatalf("list groups: %v", err)
		}
		cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || cfgs[0].Err != nil {
			t.Fatalf("describe topic configs: %v %v", err, cfgs)
		}
		del, err := adm.DeleteTopics(ctx, topic)
		if err != nil || del[topic].Err != nil {
			t.Fatalf("delete topic: %v %v", err, del)
		}
		rec.AssertOnlyProxy(t, p)
	})
}

// TestApiVersionsCapped: the proxy caps decoded keys to what kmsg knows,
// removes keys it would not forward, adds TxnShareAcknowledge, and keeps the
// feature tags (clients choose transaction version 2 from them).
func TestApiVersionsCapped(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		p := StartProxy(t, b.Seeds)
		cl := p.NewClient(t, &DialRecorder{})
		req := kmsg.NewPtrApiVersionsRequest()
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
		if err != nil {
			t.Fatalf("api versions: %v", err)
		}
		if len(resp.ApiKeys) == 0 {
			t.Fatal("no api keys")
		}
		txnKey := false
		for _, k := range resp.ApiKeys {
			if k.ApiKey == kip1289.DefaultKey {
				txnKey = k.MinVersion == 0 && k.MaxVersion == 0
				continue
			}
			r := kmsg.RequestForKey(k.ApiKey)
			if r == nil {
				t.Errorf("key %d is advertised but kmsg does not know it", k.ApiKey)
				continue
			}
			if k.ApiKey == kmsg.Metadata.Int16() || k.ApiKey == kmsg.Fetch.Int16() || k.ApiKey == kmsg.Produce.Int16() {
				if k.MaxVersion > r.MaxVersion() {
					t.Errorf("%s advertised up to v%d, kmsg decodes up to v%d", kmsg.NameForKey(k.ApiKey), k.MaxVersion, r.MaxVersion())
				}
			}
		}
		if !txnKey {
			t.Error("TxnShareAcknowledge (key 95, v0) is not advertised")
		}
		if b.Fake == nil { // a real 4.2+ broker finalizes transaction.version=2
			tv := int16(-1)
			for _, f := range resp.FinalizedFeatures {
				if f.Name == "transaction.version" {
					tv = f.MaxVersionLevel
				}
			}
			if tv < 2 {
				t.Errorf("finalized transaction.version through the proxy is %d, want 2 (features: %+v)", tv, resp.FinalizedFeatures)
			}
		}

		// An ApiVersions version newer than the proxy decodes gets a broker-style
		// UNSUPPORTED_VERSION answer, not a dropped connection.
		conn, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		high := kmsg.NewPtrApiVersionsRequest()
		high.Version = 0 // encoded body of v0 is empty; the header says v99
		frame := rawRequest(kmsg.ApiVersions.Int16(), 99, 7, nil)
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		rf, err := readResponse(conn)
		if err != nil {
			t.Fatalf("reading the answer to ApiVersions v99: %v", err)
		}
		if corr := int32(be32(rf[0:])); corr != 7 {
			t.Errorf("correlation id %d, want 7", corr)
		}
		v0 := kmsg.NewPtrApiVersionsResponse()
		v0.Version = 0
		if err := v0.ReadFrom(rf[4:]); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if v0.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Errorf("error code %d, want UNSUPPORTED_VERSION", v0.ErrorCode)
		}
	})
}

// rawRoundTrip sends req at exactly its version on a new connection and
// decodes the answer.
func rawRoundTrip(t testing.TB, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(rawRequest(req.Key(), req.GetVersion(), 9, req.AppendTo(nil))); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	rf, err := readResponse(c)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	off := 4
	if req.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		off++ // empty header tags
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(rf[off:]); err != nil {
		t.Fatalf("decoding %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}
