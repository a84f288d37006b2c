package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The reference implementation's three-broker tests: the source partition's
// leader is not the share coordinator, leaders are spread, and brokers fail
// over while acknowledgements are TX_PENDING. They need three brokers: kfake
// with three, and the real cluster of make test's three-node pass (on the
// one-node pass they skip, saying so). A real broker is failed over with
// `kafka.sh restart-node` (kill -9, start again on its data); a kfake one
// by moving the partition's leadership (or the coordinators) elsewhere.

func needThreeBrokers(t *testing.T, b *Backend) {
	t.Helper()
	if b.Nodes < 3 {
		t.Skipf("needs 3 brokers; this cluster has %d (make test runs ./e2e again on 3 nodes)", b.Nodes)
	}
}

// leaderOf is the node id of the leader of topic/partition, asked straight
// of the cluster. A topic just created may not be in the metadata of the
// broker asked yet (on three nodes each learns it from the controller in its
// own time), so an absent partition or leader is asked again for up to 30 s.
func leaderOf(t *testing.T, b *Backend, topic string, partition int32) int32 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := ctxT(t, 30*time.Second)
	for {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := md.Topics[topic].Partitions[partition]; ok && p.Err == nil && p.Leader >= 0 {
			return p.Leader
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader of partition %d of %s in 30 s", partition, topic)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shareCoordinatorOf is the node hosting the share state of
// group/topic/partition (FindCoordinator, key type SHARE), or -1 where the
// cluster has no share coordinator of its own (kfake).
func shareCoordinatorOf(t *testing.T, b *Backend, group string, topicID [16]byte, partition int32) int32 {
	t.Helper()
	if b.Fake != nil {
		return -1
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 2 // SHARE
	req.CoordinatorKeys = []string{fmt.Sprintf("%s:%s:%d", group, base64.RawURLEncoding.EncodeToString(topicID[:]) /* Kafka's Uuid.toString() */, partition)}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
		if err == nil && len(resp.Coordinators) == 1 {
			c := resp.Coordinators[0]
			if err = kerr.ErrorForCode(c.ErrorCode); err == nil {
				return c.NodeID
			}
		}
		if time.Now().After(deadline) { // COORDINATOR_NOT_AVAILABLE while the state topic loads
			t.Fatalf("FindCoordinator(SHARE): %v", err)
		}
	}
}

// failOver makes node lose what it leads: a real broker is killed with
// kill -9 and started again on its data; on kfake the leadership of
// topic/partition moves to another node (topic "" moves the coordinators).
func failOver(t *testing.T, b *Backend, node int32, topic string, partition int32) {
	t.Helper()
	if b.Fake != nil {
		if topic == "" {
			b.Fake.RehashCoordinators()
			return
		}
		to := (node + 1) % int32(b.Nodes)
		if err := b.Fake.MoveTopicPartition(topic, partition, to); err != nil {
			t.Fatalf("moving %s[%d] from node %d to %d: %v", topic, partition, node, to, err)
		}
		return
	}
	script := os.Getenv("E2E_KAFKA_SCRIPT")
	if script == "" {
		script = "kafka/kafka.sh"
	}
	t0 := time.Now()
	out, err := exec.Command(script, "restart-node", fmt.Sprint(node)).CombinedOutput()
	if err != nil {
		t.Fatalf("%s restart-node %d: %v\n%s", script, node, err, out)
	}
	t.Logf("node %d killed and restarted in %v", node, time.Since(t0).Round(time.Millisecond))
}

// threeLeaderTopic creates a topic of 3 partitions whose leaders are three
// different brokers.
func threeLeaderTopic(t *testing.T, adm *kadm.Client, b *Backend) string {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		topic := createTopic(t, adm, b, 3)
		leaders := map[int32]bool{}
		for p := int32(0); p < 3; p++ {
			leaders[leaderOf(t, b, topic, p)] = true
		}
		if len(leaders) == 3 {
			return topic
		}
		if b.Fake != nil {
			for p := int32(0); p < 3; p++ {
				if err := b.Fake.MoveTopicPartition(topic, p, p); err != nil {
					t.Fatal(err)
				}
			}
			return topic
		}
	}
	t.Fatal("no topic with three different partition leaders in five tries")
	return ""
}

// produceTo writes values to topic/partition straight to the cluster.
func produceTo(t *testing.T, b *Backend, topic string, partition int32, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// remoteCoordinatorSetup is one record on a partition whose leader is not
// the node holding its share state (ShareConsumerTransactionTest's
// *WithRemoteShareCoordinator).
func remoteCoordinatorSetup(t *testing.T, b *Backend) (*refSetup, *refClient, int32) {
	t.Helper()
	// Six partitions: some partition's leader is all but surely not the
	// node holding its share state.
	s := newRefSetupWith(t, b, "ref-remote", func(adm *kadm.Client) string { return createTopic(t, adm, b, 6) }, 1)
	id := topicIDOf(t, s.admin, s.in)
	part := int32(-1)
	for p := int32(0); p < 6 && part < 0; p++ {
		if c := shareCoordinatorOf(t, b, s.group, id, p); c != leaderOf(t, b, s.in, p) {
			part = p
			t.Logf("partition %d: leader %d, share coordinator %d", p, leaderOf(t, b, s.in, p), c)
		}
	}
	if part < 0 {
		t.Skip("every partition's leader also holds its share state: no remote share coordinator to test")
	}
	produceTo(t, b, s.in, part, "remote-0")
	return s, s.client(t), part
}

// TestTransactionalShareAckCommitAcceptWithRemoteShareCoordinator: commit
// of a record whose share state lives on another broker.
func TestTransactionalShareAckCommitAcceptWithRemoteShareCoordinator(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) {
		needThreeBrokers(t, b)
		s, rc, _ := remoteCoordinatorSetup(t, b)
		ctx := ctxT(t, 2*time.Minute)
		recs := rc.poll(t, ctx, 1)
		rc.beginAndStage(t, ctx, recs, 1)
		rc.endTxn(t, ctx, true)
		s.nothingLeft(t, rc)
	})
}

// TestTransactionalShareAckAbortAcceptWithRemoteShareCoordinator: the
// aborted record comes back.
func TestTransactionalShareAckAbortAcceptWithRemoteShareCoordinator(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) {
		needThreeBrokers(t, b)
		_, rc, _ := remoteCoordinatorSetup(t, b)
		ctx := ctxT(t, 2*time.Minute)
		recs := rc.poll(t, ctx, 1)
		rc.beginAndStage(t, ctx, recs, 1)
		rc.endTxn(t, ctx, false)
		t.Logf("abort → redelivered: %v", rc.waitRedelivered(t, recs, 30*time.Second))
	})
}

// pendingFailover is ShareConsumerTransactionTest's
// *FailoverWithPendingState: stage, close the consumer, fail over the
// source leader (or the share coordinator); nothing is handed out while the
// transaction is open; then commit (nothing left) or abort (the record
// comes back).
func pendingFailover(t *testing.T, b *Backend, coordinator, commit bool) {
	s, rc, part := remoteCoordinatorSetup(t, b)
	ctx := ctxT(t, 3*time.Minute)
	recs := rc.poll(t, ctx, 1)
	rc.beginAndStage(t, ctx, recs, 1)
	rc.consumer.Close()
	if coordinator {
		node := shareCoordinatorOf(t, b, s.group, rc.topicIDs[s.in], part)
		failOver(t, b, node, "", 0)
	} else {
		failOver(t, b, leaderOf(t, b, s.in, part), s.in, part)
	}
	// A second member, through the proxy: while the transaction is open it
	// is handed nothing (the broker may redeliver the record once the
	// failover dropped its acquisition; the proxy holds it for the open
	// transaction).
	other := s.client(t)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	for pctx.Err() == nil {
		ppctx, pcancel := context.WithTimeout(pctx, time.Second)
		if got := other.consumer.PollRecords(ppctx, 10).Records(); len(got) > 0 {
			t.Fatalf("a second member was handed %s[%d]@%d while its acknowledgement is TX_PENDING", got[0].Topic, got[0].Partition, got[0].Offset)
		}
		pcancel()
	}
	cancel()
	// The transaction ends through a producer that is still connected.
	rc.endTxn(t, ctx, commit)
	if commit {
		s.nothingLeft(t, other)
		return
	}
	t.Logf("abort → redelivered to the second member: %v", other.waitRedelivered(t, recs, 45*time.Second))
}

func TestTransactionalShareAckCommitAfterSourceLeaderFailoverWithPendingState(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); pendingFailover(t, b, false, true) })
}

func TestTransactionalShareAckAbortAfterSourceLeaderFailoverWithPendingState(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); pendingFailover(t, b, false, false) })
}

func TestTransactionalShareAckCommitAfterShareCoordinatorFailoverWithPendingState(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); pendingFailover(t, b, true, true) })
}

func TestTransactionalShareAckAbortAfterShareCoordinatorFailoverWithPendingState(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); pendingFailover(t, b, true, false) })
}

// ---------------------------------------------------------------- ShareGroupTransactionIntegrationTest

// threeLeaders is ShareGroupTransactionIntegrationTest.runCommitAndAbort: 6
// records on 3 partitions with 3 different leaders, one record per poll and
// transaction (output + acknowledgement), the first transaction aborted and
// the rest committed; optionally the source leader fails over before the
// abort (abortAfterShutdown) or before the first commit. 6 outputs
// read_committed, the aborted input redelivered, no committed input
// redelivered.
func threeLeaders(t *testing.T, b *Backend, shutdown, beforeAbort bool) {
	s := newRefSetupWith(t, b, "ref-three", func(adm *kadm.Client) string { return threeLeaderTopic(t, adm, b) }, 3)
	for p := int32(0); p < 3; p++ {
		produceTo(t, b, s.in, p, fmt.Sprintf("%d-0", p), fmt.Sprintf("%d-1", p))
	}
	rc := s.client(t, kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict())
	ctx := ctxT(t, 4*time.Minute)
	committed := map[string]bool{}
	aborted := ""
	redelivered := false
	for len(committed) < 6 {
		recs := rc.poll(t, ctx, 1)
		r := recs[0]
		id := string(r.Value)
		if err := rc.producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := rc.producer.ProduceSync(ctx, &kgo.Record{Topic: s.out, Partition: r.Partition, Value: r.Value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if res := rc.stage(t, ctx, rc.metadata(t, ctx), recs, 1); res.code != 0 {
			t.Fatalf("TxnShareAcknowledge of %s: %v (%s)", id, res.err(), res.message)
		}
		if shutdown && (beforeAbort && aborted == "" || !beforeAbort && aborted != "" && len(committed) == 0) {
			failOver(t, b, leaderOf(t, b, s.in, r.Partition), s.in, r.Partition)
			shutdown = false
		}
		if aborted == "" {
			aborted = id
			if err := rc.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := rc.producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit of %s: %v", id, err)
		}
		if committed[id] {
			t.Fatalf("committed input %s was redelivered", id)
		}
		committed[id] = true
		redelivered = redelivered || id == aborted
	}
	if !redelivered {
		t.Fatalf("the aborted input %s did not become available again", aborted)
	}
	got := readCommitted(t, s.p, s.out, 6)
	var vals []string
	for v, n := range got {
		if n != 1 {
			t.Errorf("output %s committed %d times", v, n)
		}
		vals = append(vals, v)
	}
	slices.Sort(vals)
	if len(vals) != 6 {
		t.Fatalf("committed outputs %v, want the 6 inputs", vals)
	}
	for _, v := range vals {
		if !committed[v] {
			t.Errorf("output %s of an input that was not committed", v)
		}
	}
}

func TestCommitAndAbortAcrossThreeSourceLeaders(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); threeLeaders(t, b, false, false) })
}

func TestAbortAfterSourceLeaderShutdown(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); threeLeaders(t, b, true, true) })
}

func TestCommitAfterSourceLeaderShutdown(t *testing.T) {
	Backends(t, 3, func(t *testing.T, b *Backend) { needThreeBrokers(t, b); threeLeaders(t, b, true, false) })
}
