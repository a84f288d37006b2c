package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/kip1289"
	"github.com/sharetx/sharetx/staging"
)

// The attacks of the security review (docs/guarantees.md, "Security"), each
// rerun against the proxy in front of a cluster with SASL and a real
// authoriser: franz-go's kfake (SASL PLAIN, ACLs on, deny by default) and a
// real Kafka broker (kafka.sh's SASL_PLAINTEXT listener, StandardAuthorizer).
// Principals: alice, the application (its transactional id, the group);
// bob, another application allowed to read the group, with a transactional
// id of his own; mallory, allowed to write the shadow topic and nothing of
// alice's; sharetx, the proxy's own principal; admin, a super user.

const (
	secAdmin, secAdminPass     = "admin", "admin-secret"
	secProxy, secProxyPass     = "sharetx", "sharetx-secret"
	secAlice, secAlicePass     = "alice", "alice-secret"
	secBob, secBobPass         = "bob", "bob-secret"
	secMallory, secMalloryPass = "mallory", "mallory-secret"
)

// secCluster is a cluster with SASL and ACLs, a proxy in front of it
// authenticating as sharetx, and the names of one test's resources.
type secCluster struct {
	b      *Backend
	seeds  []string // SASL listener
	p      *Proxy
	admin  *kgo.Client // straight to the cluster, as admin
	shadow string
	in     string
	group  string
	txn    map[string]string // principal → its transactional id
}

var secPasswords = map[string]string{secAdmin: secAdminPass, secProxy: secProxyPass, secAlice: secAlicePass, secBob: secBobPass, secMallory: secMalloryPass}

func secAuth(user string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: user, Pass: secPasswords[user]}.AsMechanism())
}

// secBackends runs fn against kfake with SASL and ACLs, then against the
// real broker's SASL listener (E2E_KAFKA_SASL_SEEDS).
func secBackends(t *testing.T, fn func(t *testing.T, s *secCluster)) {
	t.Run("kfake", func(t *testing.T) {
		opts := []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser("PLAIN", secAdmin, secAdminPass), kfake.Superuser("PLAIN", secProxy, secProxyPass)}
		for _, u := range []string{secAlice, secBob, secMallory} {
			opts = append(opts, kfake.User("PLAIN", u, secPasswords[u]))
		}
		b := FakeBackend(t, 1, opts...)
		fn(t, newSecCluster(t, b, b.Seeds))
	})
	t.Run("kafka", func(t *testing.T) {
		SkipForPass(t, 1) // authorisation, not replication
		b := RealBackend(t)
		seeds := os.Getenv("E2E_KAFKA_SASL_SEEDS")
		if seeds == "" {
			if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
				t.Fatal("E2E_KAFKA_SASL_SEEDS is not set: start the broker with e2e/kafka/kafka.sh (make test does)")
			}
			t.Skip("real broker's SASL listener not configured: set E2E_KAFKA_SASL_SEEDS")
		}
		fn(t, newSecCluster(t, b, strings.Split(seeds, ",")))
	})
}

func newSecCluster(t *testing.T, b *Backend, seeds []string) *secCluster {
	t.Helper()
	s := &secCluster{b: b, seeds: seeds, shadow: Unique("sec-shadow"), group: Unique("sec-group"),
		txn: map[string]string{secAlice: Unique("alice-txn"), secBob: Unique("bob-txn"), secMallory: Unique("mallory-txn")}}
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...), secAuth(secAdmin), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	s.admin = admin
	adm := kadm.NewClient(admin)
	s.in = createTopic(t, adm, b, 1)
	// The ACLs: the same on both clusters. kfake denies what no ACL
	// allows; the real broker (allow.everyone.if.no.acl.found) denies on a
	// resource that has ACLs whoever they do not name.
	all := []kadm.ACLOperation{kadm.OpAll}
	s.grant(t, kadm.NewACLs().Topics(s.in).Allow("User:"+secAlice, "User:"+secBob, "User:"+secProxy).Operations(all...))
	s.grant(t, kadm.NewACLs().Groups(s.group).Allow("User:"+secAlice, "User:"+secBob, "User:"+secProxy).Operations(all...))
	for _, u := range []string{secAlice, secBob, secMallory} {
		s.grant(t, kadm.NewACLs().TransactionalIDs(s.txn[u]).Allow("User:"+u, "User:"+secProxy).Operations(all...))
	}
	// The shadow topic: sharetx's, and mallory may write there (the
	// attacker the review used).
	s.grant(t, kadm.NewACLs().Topics(s.shadow).Allow("User:"+secProxy).Operations(all...))
	s.grant(t, kadm.NewACLs().Topics(s.shadow).Allow("User:"+secMallory).Operations(kadm.OpWrite, kadm.OpDescribe))
	// Applications may look the shadow topic up (the Go client places its
	// touch record by partition), never write it.
	s.grant(t, kadm.NewACLs().Topics(s.shadow).Allow("User:"+secAlice, "User:"+secBob).Operations(kadm.OpDescribe))
	setShareAutoOffsetReset(t, admin, s.group)
	s.p = StartProxy(t, seeds, func(c *configs.Config) {
		c.Upstream.SASL = configs.SASL{Mechanism: "PLAIN", Username: secProxy, Password: secProxyPass}
		c.KIP1289.ShadowTopic = s.shadow
		c.KIP1289.ShadowPartitions = 2
	})
	return s
}

func (s *secCluster) grant(t *testing.T, b *kadm.ACLBuilder) {
	t.Helper()
	b.AllowHosts().ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(s.admin).CreateACLs(ctxT(t, 30*time.Second), b)
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
}

// app is one principal's share consumer and transactional producer,
// through the proxy.
type app struct {
	user     string
	clientID string
	consumer *kgo.Client
	producer *kgo.Client
	txnID    string
}

func (s *secCluster) app(t *testing.T, user string) *app {
	t.Helper()
	a := &app{user: user, clientID: Unique(user + "-member"), txnID: s.txn[user]}
	a.consumer = s.p.NewClient(t, &DialRecorder{}, secAuth(user), kgo.ShareGroup(s.group), kgo.ConsumeTopics(s.in),
		kgo.ClientID(a.clientID), kgo.FetchMaxWait(500*time.Millisecond))
	a.producer = s.p.NewClient(t, &DialRecorder{}, secAuth(user), kgo.TransactionalID(a.txnID), kgo.TransactionTimeout(time.Minute))
	return a
}

// member is the app's member id and epoch, as the group has them.
func (s *secCluster) member(t *testing.T, ctx context.Context, a *app) refMember {
	t.Helper()
	rc := &refClient{admin: s.admin, group: s.group, clientID: a.clientID}
	return rc.metadata(t, ctx)
}

// begin starts a transaction of a and returns its producer id and epoch
// (the InitProducerId went through the proxy, as alice's).
func (a *app) begin(t *testing.T, ctx context.Context) (int64, int16) {
	t.Helper()
	if err := a.producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := a.producer.ProducerID(ctx)
	if err != nil {
		t.Fatalf("%s: producer id: %v", a.user, err)
	}
	return pid, epoch
}

// aliceStarted is every attack's start: n records in the input, alice
// polled them through the proxy and began a transaction.
func (s *secCluster) aliceStarted(t *testing.T, n int) (context.Context, *app, []*kgo.Record, int64, int16) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	produceN(t, s.admin, s.in, n)
	a := s.app(t, secAlice)
	recs := pollNonEmpty(t, ctx, a.consumer, n)
	pid, epoch := a.begin(t, ctx)
	return ctx, a, recs, pid, epoch
}

// shareAckFrame is a ShareAcknowledge v1 frame of member's session (epoch
// 1) acknowledging (ACCEPT) the ranges on partition 0 of topic.
func shareAckFrame(group, member string, topic [16]byte, ranges [][2]int64) []byte {
	ack := kmsg.NewPtrShareAcknowledgeRequest()
	ack.Version = 1
	ack.GroupID, ack.MemberID, ack.ShareSessionEpoch = kmsg.StringPtr(group), kmsg.StringPtr(member), 1
	tp := kmsg.NewShareAcknowledgeRequestTopic()
	tp.TopicID = topic
	pp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	for _, r := range ranges {
		b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = r[0], r[1], []int8{1}
		pp.AcknowledgementBatches = append(pp.AcknowledgementBatches, b)
	}
	tp.Partitions = append(tp.Partitions, pp)
	ack.Topics = append(ack.Topics, tp)
	return rawRequest(ack.Key(), 1, 9, ack.AppendTo(nil))
}

// saslDial opens a raw connection to addr authenticated as user with PLAIN
// (SaslHandshake v1, SaslAuthenticate v2), or unauthenticated for "".
func saslDial(t *testing.T, addr, user string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if user == "" {
		return c
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	c.Write(rawRequest(hs.Key(), 1, 1, hs.AppendTo(nil)))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, err := readResponse(c)
	if err != nil || len(f) < 6 || int16(binary.BigEndian.Uint16(f[4:])) != 0 {
		t.Fatalf("SaslHandshake as %s: %v %x", user, err, f)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 2, []byte("\x00"+user+"\x00"+secPasswords[user])
	c.Write(rawRequest(au.Key(), 2, 2, au.AppendTo(nil)))
	f, err = readResponse(c)
	if err != nil || len(f) < 7 || int16(binary.BigEndian.Uint16(f[5:])) != 0 {
		t.Fatalf("SaslAuthenticate as %s: %v %x", user, err, f)
	}
	return c
}

// exchange sends req on c (correlation id corr) and decodes the answer into
// resp (of req's version); what names the exchange in a failure.
func exchange(t *testing.T, c net.Conn, what string, corr int32, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	c.Write(rawRequest(req.Key(), req.GetVersion(), corr, req.AppendTo(nil)))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	f, err := readResponse(c)
	if err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(f[5:]); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// refSendOn sends one TxnShareAcknowledge on c and decodes the answer; ok
// is false when the proxy closed the connection instead.
func refSendOn(t *testing.T, c net.Conn, corr int32, body []byte) (refResult, bool) {
	t.Helper()
	c.Write(rawRequest(refKey, 0, corr, body))
	c.SetReadDeadline(time.Now().Add(40 * time.Second))
	frame, err := readResponse(c)
	if err != nil {
		return refResult{}, false
	}
	res, err := refDecodeResponse(frame[5:])
	if err != nil {
		t.Fatalf("%v: %x", err, frame)
	}
	return res, true
}

// stageAs is a TxnShareAcknowledge of recs (type ty) from user, on an
// authenticated connection of its own.
func (s *secCluster) stageAs(t *testing.T, user, txnID string, pid int64, epoch int16, m refMember, recs []*kgo.Record, ty int8) refResult {
	t.Helper()
	ids := map[string][16]byte{s.in: topicIDOf(t, s.admin, s.in)}
	c := saslDial(t, s.p.Addr, user)
	for i, p := range refPartitions(ids, recs, ty) {
		res, ok := refSendOn(t, c, int32(10+i), refRequest(txnID, pid, epoch, m, p))
		if !ok {
			t.Fatalf("%s: the proxy closed an authenticated connection", user)
		}
		if res.code != 0 {
			return res
		}
	}
	return refResult{}
}

// aliceStagesAndCommits is the end of every attack: alice stages ACCEPT of
// recs herself, commits with EndTxn, and the records are acknowledged
// (a fresh member is handed none of them).
func (s *secCluster) aliceStagesAndCommits(t *testing.T, ctx context.Context, a *app, recs []*kgo.Record) {
	t.Helper()
	pid, epoch, err := a.producer.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res := s.stageAs(t, a.user, a.txnID, pid, epoch, s.member(t, ctx, a), recs, 1); res.code != 0 {
		t.Fatalf("alice's own TxnShareAcknowledge after the attack: %v (%s)", res.err(), res.message)
	}
	a.commit(t, ctx, pid, epoch)
	s.aliceDone(t, a)
}

// commit ends a's transaction (producer id pid, epoch epoch) with a
// committing EndTxn.
func (a *app) commit(t *testing.T, ctx context.Context, pid int64, epoch int16) {
	t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = a.txnID, pid, epoch, true
	resp, err := req.RequestWith(ctx, a.producer)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("%s's EndTxn: %v", a.user, err)
	}
}

// aliceDone waits for alice's committed acknowledgements to be applied,
// closes her consumer and checks that a fresh member is handed none of her
// records.
func (s *secCluster) aliceDone(t *testing.T, a *app) {
	t.Helper()
	Wait(t, 30*time.Second, "alice's acknowledgements applied", func() bool { return s.p.KIP().Stats().Pending == 0 })
	a.consumer.Close()
	if left := s.freshMemberGets(t, 3*time.Second); len(left) != 0 {
		t.Fatalf("%d of alice's records still to be delivered after her commit", len(left))
	}
}

// freshMemberGets is what a new member (admin, straight to the cluster) is
// handed until the group has been quiet for quiet.
func (s *secCluster) freshMemberGets(t *testing.T, quiet time.Duration) []*kgo.Record {
	t.Helper()
	b := *s.b
	b.Seeds = s.seeds
	return freshMemberGetsWith(t, &b, s.group, s.in, quiet, secAuth(secAdmin))
}

// TestAttackForgedShadowRecordChangesNothing: mallory, allowed to write the
// shadow topic, commits a record naming alice's group and topic with
// offsets 0..2^40 REJECT (unsigned; and one signed with a guessed key), and
// leaves another open. Before: every record handed out in the range was
// REJECTed (0 of 15 reached the consumer). Now: nothing changes, alice gets
// all 15, and the proxy counts the records it ignored.
func TestAttackForgedShadowRecordChangesNothing(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx := ctxT(t, 2*time.Minute)
		produceN(t, s.admin, s.in, 10)
		forged := &staging.ShadowRecord{ProxyID: "mallory", TransactionalID: s.txn[secMallory], GroupID: s.group,
			Topics: []staging.ShadowTopic{{TopicID: topicIDOf(t, s.admin, s.in), Partitions: []staging.ShadowPartition{{Partition: 0,
				AcknowledgementBatches: []staging.ShadowBatch{{FirstOffset: 0, LastOffset: 1 << 40, AcknowledgeTypes: []int8{3}}}}}}}}
		forger, err := kgo.NewClient(kgo.SeedBrokers(s.seeds...), secAuth(secMallory), kgo.TransactionalID(s.txn[secMallory]),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer forger.Close()
		for i, commit := range []bool{true, false} {
			if err := forger.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			pid, epoch, err := forger.ProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			forged.ProducerID, forged.ProducerEpoch = pid, epoch
			values := [][]byte{forged.AppendTo(nil), forged.AppendSigned(nil, staging.DeriveShadowKey([]byte("a guess at sharetx's shadow key")))}
			for _, v := range values {
				if err := forger.ProduceSync(ctx, &kgo.Record{Topic: s.shadow, Partition: int32(i), Value: v}).FirstErr(); err != nil {
					t.Fatalf("mallory's write to the shadow topic (she is allowed to): %v", err)
				}
			}
			if commit {
				if err := forger.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
		}
		Wait(t, 30*time.Second, "the proxy to read the forged records", func() bool {
			return metricValue(s.p, "sharetx_shadow_records_rejected_total") >= 4
		})
		a := s.app(t, secAlice)
		var got []*kgo.Record
		for len(got) < 10 && ctx.Err() == nil {
			got = append(got, a.consumer.PollRecords(ctx, 100).Records()...)
		}
		produceN(t, s.admin, s.in, 5)
		for len(got) < 15 && ctx.Err() == nil {
			got = append(got, a.consumer.PollRecords(ctx, 100).Records()...)
		}
		if len(got) != 15 {
			t.Fatalf("alice got %d of 15 records with forged shadow records in the topic", len(got))
		}
		t.Logf("alice got %d of 15; the proxy ignored %v forged shadow records", len(got), metricValue(s.p, "sharetx_shadow_records_rejected_total"))
	})
}

// TestAttackUnauthenticatedStaging: a socket that never authenticates sends
// a TxnShareAcknowledge naming alice's transaction and member with REJECT.
// Before: staged, and alice's commit archived the record. Now: the proxy
// closes the connection as the broker closes one that sends requests before
// SASL; nothing is staged (alice stages the same offset herself).
func TestAttackUnauthenticatedStaging(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 1)
		m := s.member(t, ctx, a)
		ids := map[string][16]byte{s.in: topicIDOf(t, s.admin, s.in)}
		c := saslDial(t, s.p.Addr, "")
		if res, ok := refSendOn(t, c, 1, refRequest(a.txnID, pid, epoch, m, refPartitions(ids, recs, 3)[0])); ok {
			t.Fatalf("an unauthenticated TxnShareAcknowledge was answered: %v (%s)", res.err(), res.message)
		}
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// TestAttackAnotherPrincipalsTransaction: mallory, authenticated, stages
// into alice's transaction (its id, producer id and epoch). Before: staged
// with the proxy's credentials. Now: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
// as the reference broker answers, with a message that names no number.
func TestAttackAnotherPrincipalsTransaction(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 1)
		res := s.stageAs(t, secMallory, a.txnID, pid, epoch, s.member(t, ctx, a), recs, 3)
		if res.code != kerr.TransactionalIDAuthorizationFailed.Code {
			t.Fatalf("mallory into alice's transaction: %v (%s), want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", res.err(), res.message)
		}
		if strings.ContainsAny(res.message, "0123456789") {
			t.Fatalf("the refusal tells a stranger a number: %q", res.message)
		}
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// TestAttackAnotherMembersOffsets: bob, allowed to read the group and with
// a transaction of his own, stages ACCEPT of alice's records naming her
// member (from DescribeShareGroups) and leaving the member to the proxy.
// Before: alice's records acknowledged with no output. Now: UNKNOWN_MEMBER_ID
// and INVALID_RECORD_STATE; alice stages them herself.
func TestAttackAnotherMembersOffsets(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, _, _ := s.aliceStarted(t, 3)
		bob := s.app(t, secBob)
		bpid, bepoch := bob.begin(t, ctx)
		bob.consumer.PollRecords(ctxT(t, 3*time.Second), 1) // bob is a member of the group too
		m := s.member(t, ctx, a)
		if res := s.stageAs(t, secBob, bob.txnID, bpid, bepoch, m, recs, 1); res.code != kerr.UnknownMemberID.Code {
			t.Fatalf("bob naming alice's member: %v (%s), want UNKNOWN_MEMBER_ID", res.err(), res.message)
		}
		if res := s.stageAs(t, secBob, bob.txnID, bpid, bepoch, refMember{group: s.group}, recs, 1); res.code != kerr.InvalidRecordState.Code {
			t.Fatalf("bob with the member left to the proxy: %v (%s), want INVALID_RECORD_STATE", res.err(), res.message)
		}
		bob.consumer.Close()
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// TestAttackAcquisitionErasure: mallory sends one ShareAcknowledge naming
// a bogus member and alice's offsets; the broker refuses it. Before: the
// proxy had already cleared every member's acquisitions of the partition
// and alice's next TxnShareAcknowledge failed. Now: nothing changed.
func TestAttackAcquisitionErasure(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, _, _ := s.aliceStarted(t, 3)
		c := saslDial(t, s.leaderAddr(t, ctx), secBob)
		c.Write(shareAckFrame(s.group, "bogus-member-0000000000", topicIDOf(t, s.admin, s.in), [][2]int64{{0, 1 << 20}}))
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		f, err := readResponse(c)
		if err != nil {
			t.Fatalf("the bogus ShareAcknowledge got no answer: %v", err)
		}
		resp := kmsg.NewPtrShareAcknowledgeResponse()
		resp.Version = 1
		if err := resp.ReadFrom(f[5:]); err != nil || resp.ErrorCode == 0 {
			t.Fatalf("the broker accepted a bogus member's ShareAcknowledge: %v %+v", err, resp)
		}
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// leaderAddr is the proxy's listener for the input partition's leader.
func (s *secCluster) leaderAddr(t *testing.T, ctx context.Context) string {
	t.Helper()
	cl := s.p.NewClient(t, &DialRecorder{}, secAuth(secAdmin))
	md, err := kadm.NewClient(cl).Metadata(ctx, s.in)
	if err != nil {
		t.Fatal(err)
	}
	leader := md.Topics[s.in].Partitions[0].Leader
	for _, br := range md.Brokers {
		if br.NodeID == leader {
			return net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port)))
		}
	}
	t.Fatalf("no broker %d in the proxy's metadata", leader)
	return ""
}

// TestAttackSizeBombs: requests small on the wire and huge in what they
// name. Before: a 1,304-byte ShareAcknowledge (64 batches of 2^20+1
// offsets) ran the proxy out of memory; a 50 KB TxnShareAcknowledge (2000
// partitions × [0, 2^20]) held the engine lock 54 s; many partitions of an
// unknown topic were answered 14.7× the request's size. Now each is
// refused or answered within bounds, with alice served throughout.
func TestAttackSizeBombs(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 3)
		m := s.member(t, ctx, a)
		topic := topicIDOf(t, s.admin, s.in)

		// Alice has one record staged (the partition has state the proxy
		// looks at), then 64 batches of 2^20+1 offsets in one
		// ShareAcknowledge naming her member.
		if res := s.stageAs(t, a.user, a.txnID, pid, epoch, m, recs[:1], 1); res.code != 0 {
			t.Fatalf("alice's first TxnShareAcknowledge: %v (%s)", res.err(), res.message)
		}
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := saslDial(t, s.leaderAddr(t, ctx), secMallory)
		var wide [][2]int64
		for i := int64(0); i < 64; i++ {
			wide = append(wide, [2]int64{i << 21, i<<21 + 1<<20})
		}
		body := shareAckFrame(s.group, m.member, topic, wide)
		c.Write(body)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		readResponse(c) // the broker's answer (or a close): either is fine
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("wide ShareAcknowledge: %d bytes on the wire; proxy heap %+d KiB", len(body), grew>>10)
		if grew > 256<<20 {
			t.Fatalf("a %d-byte ShareAcknowledge grew the heap by %d MiB", len(body), grew>>20)
		}

		// 2000 partitions × [0, 2^20] in one TxnShareAcknowledge.
		big := refBody(s.txn[secAlice], pid, epoch, m, topic, 2000, 1<<20)
		ac := saslDial(t, s.p.Addr, secAlice)
		start := time.Now()
		res, ok := refSendOn(t, ac, 1, big)
		if !ok || res.code != kerr.InvalidRequest.Code {
			t.Fatalf("2000 partitions × 2^20 offsets: %v %v (%s), want INVALID_REQUEST", ok, res.err(), res.message)
		}
		t.Logf("TxnShareAcknowledge of %d bytes naming 2000 × 2^20 offsets refused in %v", len(big), time.Since(start).Round(time.Millisecond))

		// Many partitions of an unknown topic: answered no larger than asked.
		unknown := refBody(s.txn[secAlice], pid, epoch, m, [16]byte{0xde, 0xad}, 900, 0)
		ac.Write(rawRequest(refKey, 0, 2, unknown))
		f, err := readResponse(ac)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("900 partitions of an unknown topic: request %d bytes, response %d bytes", len(unknown), len(f))
		if len(f) > len(unknown)+256 {
			t.Fatalf("a %d-byte request was answered with %d bytes", len(unknown), len(f))
		}
		// Alice was served throughout.
		s.aliceStagesAndCommits(t, ctx, a, recs[1:])
	})
}

// refBody is a TxnShareAcknowledge naming parts partitions of topic, each
// with one ACCEPT batch [0, last].
func refBody(txnID string, pid int64, epoch int16, m refMember, topic [16]byte, parts int, last int64) []byte {
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))+1); b = append(b, s...) }
	str(txnID)
	str(m.group)
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	str(m.member)
	b = binary.BigEndian.AppendUint32(b, uint32(m.epoch))
	b = append(b, 2)
	b = append(b, topic[:]...)
	b = binary.AppendUvarint(b, uint64(parts)+1)
	for i := 0; i < parts; i++ {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = append(b, 2)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(last))
		b = append(b, 2, 1, 0, 0)
	}
	return append(b, 0, 0)
}

// TestAttackTouchNeedsNoShadowWrite: alice has no ACL on the shadow topic
// (straight to the broker her write there is refused), yet the Go client's
// touch record (franz-go sends no EndTxn for a transaction that produced
// nothing) goes through: the proxy relays it with its own credentials.
func TestAttackTouchNeedsNoShadowWrite(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx := ctxT(t, 2*time.Minute)
		touchPart := 1 - staging.ShadowPartitionFor(s.txn[secAlice], 2)
		direct, err := kgo.NewClient(kgo.SeedBrokers(s.seeds...), secAuth(secAlice), kgo.DisableIdempotentWrite(),
			kgo.RequiredAcks(kgo.LeaderAck()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1))
		if err != nil {
			t.Fatal(err)
		}
		defer direct.Close()
		if err := direct.ProduceSync(ctx, &kgo.Record{Topic: s.shadow, Partition: touchPart, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("alice straight to the shadow topic: %v, want TOPIC_AUTHORIZATION_FAILED (the ACLs do not hold)", err)
		}
		producer := s.p.NewClient(t, &DialRecorder{}, secAuth(secAlice), kgo.TransactionalID(s.txn[secAlice]), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := producer.ProduceSync(ctx, touchRecord(s.shadow, touchPart)).FirstErr(); err != nil {
			t.Fatalf("alice's touch record through the proxy: %v", err)
		}
		if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("committing the touched transaction: %v", err)
		}
	})
}

// touchRecord is the Go and Java libraries' touch record on partition.
func touchRecord(shadow string, partition int32) *kgo.Record {
	return &kgo.Record{Topic: shadow, Partition: partition, Value: []byte(kip1289.TouchValue),
		Headers: []kgo.RecordHeader{{Key: kip1289.TouchHeader, Value: []byte(kip1289.TouchHeaderValue)}}}
}

// TestAttackShadowTopicTakesOnlyTouches: through the proxy, the shadow topic
// takes a transaction's own touch record and nothing else, whoever writes:
// alice (no WRITE there; the proxy relays with its own credentials) gets
// TOPIC_AUTHORIZATION_FAILED for a record that is not a touch, for a touch
// on her transaction's shadow partition (whose sequence numbers the proxy's
// writer owns) and for a big one; mallory, whom the ACLs let write there,
// gets it too for a plain write. The refused writes reach no partition:
// the shadow topic holds only alice's committed touch afterwards.
func TestAttackShadowTopicTakesOnlyTouches(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx := ctxT(t, 2*time.Minute)
		shadowPart := staging.ShadowPartitionFor(s.txn[secAlice], 2)
		touchPart := 1 - shadowPart
		before := endOffsets(t, s.admin, s.shadow)
		producer := s.p.NewClient(t, &DialRecorder{}, secAuth(secAlice), kgo.TransactionalID(s.txn[secAlice]),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2))
		refused := map[string]*kgo.Record{
			"not a touch":                     {Topic: s.shadow, Partition: touchPart, Value: []byte("x")},
			"a touch on the shadow partition": touchRecord(s.shadow, shadowPart),
			"a big touch":                     {Topic: s.shadow, Partition: touchPart, Value: make([]byte, 600<<10), Headers: touchRecord(s.shadow, 0).Headers},
		}
		for name, r := range refused {
			if err := producer.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := producer.ProduceSync(ctx, r).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Errorf("alice, %s: %v, want TOPIC_AUTHORIZATION_FAILED", name, err)
			}
			if err := producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatalf("aborting after %s: %v", name, err)
			}
		}
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := producer.ProduceSync(ctx, touchRecord(s.shadow, touchPart)).FirstErr(); err != nil {
			t.Fatalf("alice's touch after the refusals: %v", err)
		}
		if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("committing the touched transaction: %v", err)
		}
		mallory := s.p.NewClient(t, &DialRecorder{}, secAuth(secMallory), kgo.DisableIdempotentWrite(),
			kgo.RequiredAcks(kgo.LeaderAck()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1))
		for p := int32(0); p < 2; p++ {
			if err := mallory.ProduceSync(ctx, touchRecord(s.shadow, p)).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Errorf("mallory's plain write to shadow partition %d through the proxy: %v, want TOPIC_AUTHORIZATION_FAILED", p, err)
			}
		}
		after := endOffsets(t, s.admin, s.shadow)
		if got := after[shadowPart] - before[shadowPart]; got != 0 {
			t.Errorf("the shadow partition grew by %d offsets: a refused write got through", got)
		}
		// The touch and its commit marker; the aborted transactions wrote
		// nothing there, so they have no markers on it either.
		if got := after[touchPart] - before[touchPart]; got != 2 {
			t.Errorf("the touch partition grew by %d offsets, want 2 (the touch and its commit marker)", got)
		}
	})
}

// endOffsets is the end offset of each partition of topic.
func endOffsets(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctxT(t, 30*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// TestAttackOnePrincipalTakesNoOthersConnections: mallory holds every
// connection limits.max_connections_per_principal lets her authenticate
// (and more that never authenticate); her next authenticated connection is
// closed once its authentication is answered, while alice still connects,
// authenticates and is served. The connections that never authenticated
// are closed at timeouts.client_authenticate.
func TestAttackOnePrincipalTakesNoOthersConnections(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		p := StartProxy(t, s.seeds, func(c *configs.Config) {
			c.Upstream.SASL = configs.SASL{Mechanism: "PLAIN", Username: secProxy, Password: secProxyPass}
			c.KIP1289.ShadowTopic = s.shadow
			c.KIP1289.ShadowPartitions = 2
			c.Limits.MaxConnectionsPerPrincipal = 3
			c.Timeouts.ClientAuthenticate = 2 * time.Second
		})
		var silent []net.Conn
		for range 5 { // connected, never a byte sent
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			silent = append(silent, c)
		}
		var held []net.Conn
		for i := range 3 {
			c := saslDial(t, p.Addr, secMallory)
			roundTrip(t, c, int32(10+i))
			held = append(held, c)
		}
		extra := saslDial(t, p.Addr, secMallory) // authenticated, then closed
		expectClosed(t, extra)
		Wait(t, 10*time.Second, "connections_closed_total{reason=max_connections_per_principal}", func() bool {
			return closedCount(p, "max_connections_per_principal") >= 1
		})
		if n := closedCount(p, "max_connections_per_principal"); n != 1 {
			t.Errorf("connections_closed_total{reason=max_connections_per_principal} = %v, want 1", n)
		}
		if !p.Logs.Contains("limits.max_connections_per_principal") {
			t.Error("no log line naming limits.max_connections_per_principal")
		}
		alice := saslDial(t, p.Addr, secAlice)
		roundTrip(t, alice, 20)
		metadata := p.NewClient(t, &DialRecorder{}, secAuth(secAlice))
		if _, err := kadm.NewClient(metadata).BrokerMetadata(ctxT(t, 30*time.Second)); err != nil {
			t.Fatalf("alice's client while mallory holds her share: %v", err)
		}
		for i, c := range held { // still served: her share, not more
			roundTrip(t, c, int32(30+i))
		}
		for _, c := range silent {
			expectClosed(t, c)
		}
		Wait(t, 10*time.Second, "connections_closed_total{reason=unauthenticated_timeout}", func() bool {
			return closedCount(p, "unauthenticated_timeout") >= 5
		})
		// A place given back is taken again.
		held[0].Close()
		Wait(t, 10*time.Second, "mallory's closed connection to be counted out", func() bool {
			c := saslDial(t, p.Addr, secMallory)
			c.Write(rawRequest(kmsg.ApiVersions.Int16(), 0, 40, nil))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := readResponse(c)
			c.Close()
			return err == nil
		})
	})
}

// TestAttackAnotherMembersSession: bob may read the group, so the broker
// would let him use any member id of it: close alice's share session with
// a ShareFetch of epoch -1 (her acquired records released, and handed out
// again after she commits them) or make her leave with a heartbeat. The
// proxy knows the member is alice's and answers GROUP_AUTHORIZATION_FAILED
// without forwarding; alice's session is untouched and her staged
// acknowledgements commit.
func TestAttackAnotherMembersSession(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, _, _ := s.aliceStarted(t, 3)
		bob := s.app(t, secBob)
		bob.consumer.PollRecords(ctxT(t, 3*time.Second), 1) // bob is a member of the group too
		m := s.member(t, ctx, a)
		c := saslDial(t, s.leaderAddr(t, ctx), secBob)
		code := func(what string, frame []byte, decode func([]byte) (int16, error)) {
			t.Helper()
			c.Write(frame)
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			f, err := readResponse(c)
			if err != nil {
				t.Fatalf("%s: no answer: %v", what, err)
			}
			got, err := decode(f[5:])
			if err != nil || got != kerr.GroupAuthorizationFailed.Code {
				t.Fatalf("%s: error code %d (%v), want GROUP_AUTHORIZATION_FAILED", what, got, err)
			}
		}
		fetch := kmsg.NewPtrShareFetchRequest()
		fetch.Version = 1
		fetch.GroupID, fetch.MemberID, fetch.ShareSessionEpoch = kmsg.StringPtr(s.group), kmsg.StringPtr(m.member), -1
		code("bob's ShareFetch closing alice's session", rawRequest(fetch.Key(), 1, 1, fetch.AppendTo(nil)), func(b []byte) (int16, error) {
			r := kmsg.NewPtrShareFetchResponse()
			r.Version = 1
			err := r.ReadFrom(b)
			return r.ErrorCode, err
		})
		hb := kmsg.NewPtrShareGroupHeartbeatRequest()
		hb.Version = 1
		hb.GroupID, hb.MemberID, hb.MemberEpoch = s.group, m.member, -1
		code("bob's heartbeat leaving as alice", rawRequest(hb.Key(), 1, 2, hb.AppendTo(nil)), func(b []byte) (int16, error) {
			r := kmsg.NewPtrShareGroupHeartbeatResponse()
			r.Version = 1
			err := r.ReadFrom(b)
			return r.ErrorCode, err
		})
		bob.consumer.Close()
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// TestAttackOwnershipFromProduce: bob, allowed to read the group and to
// write a topic of his own but not to use alice's transactional id, sends a transactional
// Produce in alice's name (her id, producer id and epoch), then stages into
// her transaction with the member left to the proxy. The real broker refuses
// the Produce (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Kafka authorises the
// id on every transactional Produce); kfake, the embedded cluster, accepts
// it. Before: the proxy took the accepted Produce as bob's WRITE on the id
// and made him an owner of alice's transaction (only the acquisition check,
// INVALID_RECORD_STATE, stopped the call). Now: in front of a cluster that
// does not authorise the id on Produce (kip1289.learn_owner_from_produce
// false, as sharetx sets for its embedded cluster), ownership is learned
// only from InitProducerId and EndTxn, and bob's call is refused as a
// stranger's: TRANSACTIONAL_ID_AUTHORIZATION_FAILED on both clusters.
func TestAttackOwnershipFromProduce(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 2)
		bob := s.app(t, secBob)
		bob.consumer.PollRecords(ctxT(t, 3*time.Second), 1) // bob is a member of the group too
		// A topic of bob's own (alice's input must stay hers to count).
		out := createTopic(t, kadm.NewClient(s.admin), s.b, 1)
		s.grant(t, kadm.NewACLs().Topics(out).Allow("User:"+secBob).Operations(kadm.OpAll))
		c := saslDial(t, s.p.Addr, secBob) // one broker: its listener leads everything
		req := kmsg.NewPtrProduceRequest()
		req.Version = 12
		req.TransactionID, req.Acks, req.TimeoutMillis = kmsg.StringPtr(a.txnID), -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = out
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = staging.AppendRecordBatch(nil, pid, epoch, 0, time.Now().UnixMilli(), []byte("bob, as alice"))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := kmsg.NewPtrProduceResponse()
		exchange(t, c, "bob's Produce in alice's name", 1, req, resp)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("bob's Produce in alice's name: answer %+v", resp)
		}
		code := resp.Topics[0].Partitions[0].ErrorCode
		t.Logf("%s answered bob's Produce in alice's name with %v", s.b.Name, kerr.ErrorForCode(code))
		if s.b.Fake == nil && code != kerr.TransactionalIDAuthorizationFailed.Code {
			t.Fatalf("the real broker answered bob's Produce in alice's name with %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", kerr.ErrorForCode(code))
		}
		res := s.stageAs(t, secBob, a.txnID, pid, epoch, refMember{group: s.group}, recs, 1)
		if res.code != kerr.TransactionalIDAuthorizationFailed.Code {
			t.Fatalf("bob staging into alice's transaction after his Produce in her name: %v (%s), want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", res.err(), res.message)
		}
		bob.consumer.Close()
		s.aliceStagesAndCommits(t, ctx, a, recs)
	})
}

// TestAttackClientsMoveNoAlertCounters: an authenticated client does what
// only it is to blame for: TxnShareAcknowledge calls in its own transaction
// with an epoch the proxy never saw (TRANSACTION_ABORTABLE) and a producer id
// that is not the id's (INVALID_PRODUCER_ID_MAPPING), ShareFetch with a
// session epoch out of step, and requests the broker cannot parse, followed
// by more bytes, so that the broker closes (and resets) the connection. None
// of it may move a counter that an alert of configs/k8s/prometheusrule.yaml
// reads. Before: the SharetxTxnShareAcknowledgeUnavailable alert read
// TRANSACTION_ABORTABLE answers of the proxy's refusals, and a broker's reset
// after a client's garbage counted as upstream_errors_total{kind="read"}.
// Now: the alert reads sharetx_staging_failures_total (the proxy's own
// failures to stage), and upstream_errors_total counts a broken connection
// only when a request of the proxy's own was waiting on it.
func TestAttackClientsMoveNoAlertCounters(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 2)
		m := s.member(t, ctx, a)
		for _, c := range []struct {
			name  string
			pid   int64
			epoch int16
			want  int16
		}{
			{"an epoch never seen", pid, epoch + 3, kerr.TransactionAbortable.Code},
			{"another producer id", pid + 1000, epoch, kerr.InvalidProducerIDMapping.Code},
		} {
			if res := s.stageAs(t, secAlice, a.txnID, c.pid, c.epoch, m, recs, 1); res.code != c.want {
				t.Fatalf("alice's call with %s: %v (%s), want %v", c.name, res.err(), res.message, kerr.ErrorForCode(c.want))
			}
		}
		leader := s.leaderAddr(t, ctx)
		fetch := kmsg.NewPtrShareFetchRequest()
		fetch.Version = 1
		fetch.GroupID, fetch.MemberID, fetch.ShareSessionEpoch = kmsg.StringPtr(s.group), kmsg.StringPtr(m.member), 7
		exchange(t, saslDial(t, leader, secAlice), "alice's ShareFetch out of step", 1, fetch, kmsg.NewPtrShareFetchResponse())
		// DescribeConfigs passes the proxy undecoded: its garbage reaches
		// the broker, which closes the connection with the rest unread.
		garbage := make([]byte, 64)
		for i := range garbage {
			garbage[i] = 0xff
		}
		closed := 0
		for i := 0; i < 3; i++ {
			c := saslDial(t, leader, secAlice)
			c.Write(append(rawRequest(int16(kmsg.DescribeConfigs), 4, 1, garbage), rawRequest(int16(kmsg.DescribeConfigs), 4, 2, make([]byte, 32<<10))...))
			// Read until the connection closes (the proxy counts before
			// it closes the client's side) or 20 s pass.
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			for {
				if _, err := readResponse(c); err != nil {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						closed++
					}
					break
				}
			}
		}
		t.Logf("%s closed %d of 3 connections after garbage", s.b.Name, closed)
		s.aliceStagesAndCommits(t, ctx, a, recs)
		for _, moved := range alertCountersMoved(t, s.p) {
			t.Errorf("a client moved a counter an alert reads: %s", moved)
		}
	})
}

// alertCountersMoved evaluates the selector of every counter (a sharetx_
// series ending in _total) that an alert of configs/k8s/prometheusrule.yaml
// reads against p's metrics, and returns those that are not 0.
func alertCountersMoved(t *testing.T, p *Proxy) []string {
	t.Helper()
	raw, err := os.ReadFile("../configs/k8s/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := p.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	selRe := regexp.MustCompile(`(sharetx_[a-z0-9_]*_total)(?:\{([^}]*)\})?`)
	matchRe := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	var moved []string
	counters := 0
	for _, line := range strings.Split(string(raw), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		for _, sel := range selRe.FindAllStringSubmatch(expr, -1) {
			counters++
			for _, mf := range mfs {
				if mf.GetName() != sel[1] {
					continue
				}
				for _, met := range mf.GetMetric() {
					labels := map[string]string{}
					for _, lp := range met.GetLabel() {
						labels[lp.GetName()] = lp.GetValue()
					}
					match := true
					for _, mm := range matchRe.FindAllStringSubmatch(sel[2], -1) {
						v := labels[mm[1]]
						re := regexp.MustCompile("^(?:" + mm[3] + ")$")
						switch mm[2] {
						case "=":
							match = match && v == mm[3]
						case "!=":
							match = match && v != mm[3]
						case "=~":
							match = match && re.MatchString(v)
						case "!~":
							match = match && !re.MatchString(v)
						}
					}
					if match && met.GetCounter().GetValue() != 0 {
						moved = append(moved, fmt.Sprintf("%s %v = %g (alert selector %q)", sel[1], labels, met.GetCounter().GetValue(), sel[0]))
					}
				}
			}
		}
	}
	if counters < 4 {
		t.Fatalf("found %d counter selectors in the alert rules: the rule file's layout changed", counters)
	}
	return moved
}

// TestAttackStateOutlivesItsOwner: bob, allowed to use every transactional id
// of a prefix, initialises 12 of 256 KiB and 40 short ones through the proxy,
// then goes away. Before: every id was kept (the long ones some 3 MiB), for
// an hour after it was last seen, whatever its transaction timeout. Now: an
// id longer than staging.MaxKeptIDBytes is never kept, and a prune once the
// short ones are past their transaction timeout and the 15-minute floor
// (nothing of them staged) leaves none of bob's, while alice's transaction,
// with offsets staged, stays and commits.
func TestAttackStateOutlivesItsOwner(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		ctx, a, recs, pid, epoch := s.aliceStarted(t, 2)
		if res := s.stageAs(t, a.user, a.txnID, pid, epoch, s.member(t, ctx, a), recs, 1); res.code != 0 {
			t.Fatalf("alice's TxnShareAcknowledge: %v (%s)", res.err(), res.message)
		}
		prefix := Unique("bobs-ids") + "-"
		acl := kadm.NewACLs().TransactionalIDs(prefix).Allow("User:" + secBob).Operations(kadm.OpAll).
			AllowHosts().ResourcePatternType(kadm.ACLPatternPrefixed)
		if res, err := kadm.NewClient(s.admin).CreateACLs(ctx, acl); err != nil || len(res) == 0 || res[0].Err != nil {
			t.Fatalf("create the prefixed ACL: %v %+v", err, res)
		}
		before := ledgerEntries(t, s.p, "transactions")
		c := saslDial(t, s.p.Addr, secBob)
		initAs := func(i int, id string) {
			t.Helper()
			req := kmsg.NewPtrInitProducerIDRequest()
			req.Version = 4
			req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &id, 60000, -1, -1
			resp := kmsg.NewPtrInitProducerIDResponse()
			exchange(t, c, "InitProducerId "+strconv.Itoa(i), int32(100+i), req, resp)
			if resp.ErrorCode != 0 {
				t.Fatalf("InitProducerId %d (%d bytes of id): %v", i, len(id), kerr.ErrorForCode(resp.ErrorCode))
			}
		}
		for i := 0; i < 12; i++ {
			initAs(i, prefix+strconv.Itoa(i)+strings.Repeat("x", 32000))
		}
		if got := ledgerEntries(t, s.p, "transactions") - before; got != 0 {
			t.Errorf("the proxy kept %v transactional ids of 32,000 bytes", got)
		}
		for i := 0; i < 40; i++ {
			initAs(100+i, prefix+"short-"+strconv.Itoa(i))
		}
		if got := ledgerEntries(t, s.p, "transactions") - before; got != 40 {
			t.Fatalf("the proxy keeps %v of bob's 40 short transactional ids, want 40 while they are live", got)
		}
		s.p.KIP().Prune(time.Now().Add(17 * time.Minute))
		if got := ledgerEntries(t, s.p, "transactions"); got != 1 {
			t.Errorf("after a prune past the transactions' timeouts the proxy keeps %v transactional ids, want 1 (alice's, with offsets staged)", got)
		}
		a.commit(t, ctx, pid, epoch)
		s.aliceDone(t, a)
	})
}

// ledgerEntries is the proxy's sharetx_ledger_entries{kind}.
func ledgerEntries(t *testing.T, p *Proxy, kind string) float64 {
	t.Helper()
	v, ok := labelledValue(p, "sharetx_ledger_entries", "kind", kind)
	if !ok {
		t.Fatalf("no sharetx_ledger_entries{kind=%q}", kind)
	}
	return v
}

// TestAttackSessionTakeoverReplaysNothing: a member's share session is
// taken over by a connection of the same principal (or, on a cluster
// without SASL, of anyone: the proxy cannot tell them apart) while its
// acknowledgements are staged: a ShareFetch with the member's id and epoch
// -1 closes the member's session and the broker releases its records. The
// member must not be handed those records again, neither before its commit
// nor after it, and a fresh member gets none of them once it committed: the
// proxy screens them when they come back (sharetx_redelivered_records_total)
// and acknowledges them on the new acquisition. (A takeover before anything
// is staged is an ordinary redelivery, which the proxy lets through.)
func TestAttackSessionTakeoverReplaysNothing(t *testing.T) {
	secBackends(t, func(t *testing.T, s *secCluster) {
		const n = 10
		ctx, a, recs, pid, epoch := s.aliceStarted(t, n)
		m := s.member(t, ctx, a)
		if res := s.stageAs(t, a.user, a.txnID, pid, epoch, m, recs, 1); res.code != 0 {
			t.Fatalf("alice's TxnShareAcknowledge: %v (%s)", res.err(), res.message)
		}
		screenedBefore := metricValue(s.p, "sharetx_redelivered_records_total")
		c := saslDial(t, s.leaderAddr(t, ctx), secAlice)
		fetch := kmsg.NewPtrShareFetchRequest()
		fetch.Version = 1
		fetch.GroupID, fetch.MemberID, fetch.ShareSessionEpoch = kmsg.StringPtr(s.group), kmsg.StringPtr(m.member), -1
		fr := kmsg.NewPtrShareFetchResponse()
		exchange(t, c, "the takeover ShareFetch", 1, fetch, fr)
		t.Logf("%s answered the takeover ShareFetch with %v", s.b.Name, kerr.ErrorForCode(fr.ErrorCode))
		again := map[int64]int{}
		poll := func(d time.Duration) {
			for deadline := time.Now().Add(d); time.Now().Before(deadline); {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				for _, r := range a.consumer.PollRecords(pctx, n).Records() {
					again[r.Offset]++
				}
				cancel()
			}
		}
		poll(5 * time.Second)
		if len(again) != 0 {
			t.Errorf("alice was handed records again while their acknowledgements were staged: offsets %v", again)
		}
		a.commit(t, ctx, pid, epoch)
		poll(5 * time.Second)
		if len(again) != 0 {
			t.Errorf("alice was handed records again after their acknowledgements were committed: offsets %v", again)
		}
		screened := metricValue(s.p, "sharetx_redelivered_records_total") - screenedBefore
		t.Logf("redelivered records screened %v, upstream ack failures %v", screened, metricValue(s.p, "sharetx_upstream_ack_failures_total"))
		if screened == 0 {
			t.Error("no record came back after the takeover: the broker did not release the session's records, and the test proved nothing")
		}
		a.consumer.Close()
		if left := s.freshMemberGets(t, 3*time.Second); len(left) != 0 {
			t.Fatalf("%d of alice's committed records still to be delivered", len(left))
		}
	})
}
