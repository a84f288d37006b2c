package e2e

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/configs"
)

// OnAddrsOf makes a proxy listen where p listened: a restarted sidecar.
func OnAddrsOf(p *Proxy) ProxyOpt {
	brokers := p.Brokers()
	boot := p.Addr
	return func(c *configs.Config) {
		c.Listen.Bootstrap = boot
		c.Listen.BrokerPorts = map[int32]int{}
		for _, b := range brokers {
			_, port, _ := net.SplitHostPort(b.Proxy)
			n, _ := strconv.Atoi(port)
			c.Listen.BrokerPorts[b.NodeID] = n
		}
	}
}

// TestKIP1289ProxyKilled: a proxy is killed (kill -9: its connections, and
// so the share sessions it carried, drop at once) while a transaction has
// acknowledgements staged through it. The broker redelivers those records.
// A proxy that sees them — the restarted one, reading the shadow topic back,
// or another sidecar, through the shadow topic only — must never hand them
// to an application while their transaction is open or after it committed:
//
//   - commit, then redelivery: acknowledged by the proxy with the committed
//     type, never delivered;
//   - redelivery while open, then commit: held, then acknowledged;
//   - redelivery while open, then abort: held, then released, then delivered
//     and processed.
//
// Every case ends with each input exactly once in the output (read_committed)
// and the group drained: nothing left unacknowledged.
func TestKIP1289ProxyKilled(t *testing.T) {
	cases := []struct {
		name   string
		other  bool // the redelivery goes through another sidecar, not the restarted proxy
		before bool // the transaction ends before the redelivery is fetched
		commit bool
	}{
		{"restarted/commit-then-redelivery", false, true, true},
		{"other-sidecar/redelivery-while-open-then-commit", true, false, true},
		{"restarted/redelivery-while-open-then-abort", false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			Backends(t, 1, func(t *testing.T, b *Backend) {
				const n = 12
				// One input partition: a new member shares it with the dead
				// one at once (with more partitions than members, the
				// dead member keeps its own until its session times out).
				s := newKIPSetupOn(t, b, StartProxy(t, b.Seeds), n, 1)
				ctx := ctxT(t, 3*time.Minute)
				// The transaction must outlive the kill and the redelivery
				// (franz-go's default timeout is 40 s).
				s.producer.Close()
				s.producer = newProducer(t, s.p, s.rec, kgo.TransactionalID(Unique("kip-txn")),
					kgo.DefaultProduceTopic(s.out), kgo.TransactionTimeout(3*time.Minute))

				// Stage the first poll's acknowledgements through proxy A.
				staged := s.pollSome(t, ctx, n/2)
				s.stageOutputs(t, ctx, s.producer, staged)
				stagedKeys := map[string]bool{}
				for _, r := range staged {
					stagedKeys[string(r.Key)] = true
				}

				// kill -9 A; the sidecar comes back on the same ports (the
				// producer's connections point there).
				s.p.Kill()
				s.consumer.Close() // its application died with the pod's proxy
				restarted := StartProxy(t, b.Seeds, OnAddrsOf(s.p))
				via := restarted
				if tc.other {
					via = StartProxy(t, b.Seeds)
				}
				end := func() {
					if tc.commit {
						if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
							t.Fatalf("commit through the restarted proxy: %v", err)
						}
					} else if err := s.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
						t.Fatalf("abort: %v", err)
					}
				}
				if tc.before {
					end()
				}

				consumer := via.NewClient(t, s.rec, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in),
					kgo.FetchMaxWait(500*time.Millisecond))
				producer := newProducer(t, via, s.rec, kgo.TransactionalID(Unique("kip-txn2")), kgo.DefaultProduceTopic(s.out))
				kip := via.KIP()
				redelivered := func(outcome string) float64 {
					return kip.Resolver().Redelivered(outcome)
				}
				// Process everything the group hands out, exactly like the
				// application would. When the transaction is to end after
				// the redelivery, it ends once the proxy holds all the
				// staged records.
				want := n
				if tc.commit {
					want = n - len(staged)
				}
				proxyDone := func() bool {
					if tc.commit {
						return redelivered("committed")+redelivered("held_then_committed") >= float64(len(staged))
					}
					return redelivered("held_then_aborted") >= float64(len(staged))
				}
				ended := tc.before
				got := 0
				for got < want || !ended || !proxyDone() {
					if ctx.Err() != nil {
						t.Fatalf("processed %d of %d after the proxy was killed (transaction ended: %v; held %v, acknowledged by the proxy %v, released %v)",
							got, want, ended, redelivered("held_open"), redelivered("committed")+redelivered("held_then_committed"), redelivered("held_then_aborted"))
					}
					if !ended && redelivered("held_open") >= float64(len(staged)) {
						end()
						ended = true
					}
					pctx, cancel := context.WithTimeout(ctx, time.Second)
					recs := consumer.PollRecords(pctx, n).Records()
					cancel()
					if len(recs) == 0 {
						continue
					}
					for _, r := range recs {
						switch {
						case !stagedKeys[string(r.Key)]:
						case !ended:
							t.Errorf("record %s was handed to the application while its acknowledgement was staged in an open transaction", r.Key)
						case tc.commit:
							t.Errorf("record %s was handed to the application again although its acknowledgement committed", r.Key)
						}
					}
					s.stageOutputs(t, ctx, producer, recs)
					if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
						t.Fatal(err)
					}
					got += len(recs)
				}
				Wait(t, 60*time.Second, "every committed acknowledgement applied", func() bool {
					return kip.Stats().Pending == 0 && restarted.KIP().Stats().Pending == 0
				})
				switch {
				case tc.commit && tc.before:
					if c := redelivered("committed"); c != float64(len(staged)) {
						t.Errorf("the proxy acknowledged %v redelivered committed records itself, want %d", c, len(staged))
					}
				case tc.commit:
					if c := redelivered("held_then_committed"); c != float64(len(staged)) {
						t.Errorf("%v held records acknowledged at commit, want %d", c, len(staged))
					}
				default:
					if c := redelivered("held_then_aborted"); c != float64(len(staged)) {
						t.Errorf("%v held records released at abort, want %d", c, len(staged))
					}
				}
				if left := (&kipSetup{consumer: consumer, group: s.group, in: s.in}).remaining(t, b, 3*time.Second); len(left) != 0 {
					t.Errorf("%d records were left unacknowledged in the group", len(left))
				}
				out := readCommitted(t, via, s.out, n)
				dups, lost := 0, 0
				for i := 0; i < n; i++ {
					switch c := out["out-"+strconv.Itoa(i)]; {
					case c == 0:
						lost++
					case c > 1:
						dups += c - 1
					}
				}
				t.Logf("%s: staged %d through the killed proxy; output %d distinct, %d duplicates, %d lost; redelivered and held %v, acknowledged by the proxy %v, released at abort %v",
					b.Name, len(staged), len(out), dups, lost, redelivered("held_open"), redelivered("committed")+redelivered("held_then_committed"), redelivered("held_then_aborted"))
				if dups != 0 || lost != 0 || len(out) != n {
					t.Fatalf("output: %d distinct of %d, %d duplicates, %d lost: %v", len(out), n, dups, lost, out)
				}
			})
		})
	}
}

// TestKIP1289RestartedProxyLearnsTransactions: a proxy restarts under a
// running application whose producer initialized through the old process.
// The restarted proxy learns the transaction from the producer's next write
// (a transactional Produce the broker accepted: Kafka authorises the
// transactional id on it), so the application's next TxnShareAcknowledge is
// accepted rather than refused. In front of kfake, which does not authorise
// the id on Produce, the first call is TRANSACTION_ABORTABLE and the
// transaction's abort teaches the proxy (TestAttackOwnershipFromProduce).
func TestKIP1289RestartedProxyLearnsTransactions(t *testing.T) {
	Backends(t, 1, func(t *testing.T, b *Backend) {
		const n = 6
		s := newKIPSetupOn(t, b, StartProxy(t, b.Seeds), n, 1)
		ctx := ctxT(t, 2*time.Minute)
		if err := s.producer.BeginTransaction(); err != nil { // InitProducerId through the first process
			t.Fatal(err)
		}
		if err := s.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		s.p.Kill()
		s.consumer.Close()
		restarted := StartProxy(t, b.Seeds, OnAddrsOf(s.p))
		consumer := restarted.NewClient(t, s.rec, kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in),
			kgo.FetchMaxWait(500*time.Millisecond))
		done, aborted := 0, false
		for done < n {
			if ctx.Err() != nil {
				t.Fatalf("committed %d of %d", done, n)
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			recs := consumer.PollRecords(pctx, n).Records()
			cancel()
			if len(recs) == 0 {
				continue
			}
			if err := s.tryStageOutputs(t, ctx, s.producer, recs); err != nil {
				// kfake does not authorise the transactional id on
				// Produce, so in front of it a write teaches no owner
				// (kip1289.learn_owner_from_produce false): the first
				// call is TRANSACTION_ABORTABLE, its abort's EndTxn
				// teaches the transaction, and the same records go again.
				if b.Fake == nil || aborted || !errors.Is(err, kerr.TransactionAbortable) {
					t.Fatalf("TxnShareAcknowledge after the restart: %v", err)
				}
				aborted = true
				if err := s.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
					t.Fatal(err)
				}
				s.stageOutputs(t, ctx, s.producer, recs)
			}
			if err := s.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			done += len(recs)
		}
		Wait(t, 30*time.Second, "applied", func() bool { return restarted.KIP().Stats().Pending == 0 })
		if left := (&kipSetup{consumer: consumer, group: s.group, in: s.in}).remaining(t, b, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d records left unacknowledged", len(left))
		}
	})
}
