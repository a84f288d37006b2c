package upstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// javaTakesNull lists the nullable lists and byte arrays (paths without
// indices) that the embedded cluster may send as null: Kafka's schema
// allows the null there, Kafka's brokers send it, and kafka-clients reads it
// (checked in its sources). Every other null list or byte array fails the
// test, nullable or not: the Java client tends to copy a list straight into
// its results, and a null it never gets from a real broker breaks it
// (CreateTopics Configs, DescribeTopicPartitions EligibleLeaderReplicas).
// Null strings and null structs are never flagged: brokers send them
// (error messages, racks, cursors, assignments) and clients test them.
var javaTakesNull = map[string]bool{
	// read_uncommitted fetches: brokers send null, FetchResponse's
	// consumers test for it.
	"FetchResponse.Responses.Partitions.AbortedTransactions": true,
}

// requireSchemas loads Kafka's message schemas from the kafka-clients jar
// (fetched by e2e/kafka/kafka.sh); without the jar the test skips, or fails
// under E2E_REQUIRE_KAFKA (make test).
func requireSchemas(t *testing.T) *kafkaSchemas {
	t.Helper()
	jar := kafkaClientsJar()
	s, err := loadKafkaSchemas(jar)
	if err != nil {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatalf("Kafka's message schemas: %v (fetch the jars with `e2e/kafka/kafka.sh libs`)", err)
		}
		t.Skipf("Kafka's message schemas: %v (fetch the jars with `e2e/kafka/kafka.sh libs`)", err)
	}
	return s
}

// rawClient talks to one broker of the embedded cluster with hand-built
// requests and checks every response body against Kafka's schema before
// decoding it with kmsg.
type rawClient struct {
	t       *testing.T
	addr    string
	conn    net.Conn
	corr    int32
	schemas *kafkaSchemas
	min     map[int16]int16 // the cluster's ApiVersions
	max     map[int16]int16
	fmt     *kmsg.RequestFormatter

	nulls   map[string]kafkaNull // every null met, by path without indices
	checked map[string]bool      // "Name vN" of every response checked
	// strict: null lists and byte arrays outside javaTakesNull are errors
	// (false only for the canary that counts what the cluster sends unfixed).
	strict bool
	bad    []string
	wait   time.Duration // for each response
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

func newRawClient(t *testing.T, addr string, schemas *kafkaSchemas, strict bool) *rawClient {
	c := &rawClient{
		t: t, addr: addr, schemas: schemas, strict: strict,
		fmt:   kmsg.NewRequestFormatter(kmsg.FormatterClientID("null-check")),
		nulls: map[string]kafkaNull{}, checked: map[string]bool{},
		wait: 20 * time.Second,
	}
	t.Cleanup(func() {
		if c.conn != nil {
			c.conn.Close()
		}
	})
	av := kmsg.NewPtrApiVersionsRequest()
	av.ClientSoftwareName, av.ClientSoftwareVersion = "null-check", "1"
	resp, err := c.try(av, 3)
	if err != nil {
		t.Fatal(err)
	}
	c.min, c.max = map[int16]int16{}, map[int16]int16{}
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		c.min[k.ApiKey], c.max[k.ApiKey] = k.MinVersion, k.MaxVersion
	}
	return c
}

// version is what a kafka-clients client would use: the newest version both
// the cluster and Kafka's schema know, and kmsg can encode.
func (c *rawClient) version(key int16) int16 {
	c.t.Helper()
	m := c.schemas.Responses[key]
	if m == nil {
		c.t.Fatalf("no Kafka schema for key %d", key)
	}
	_, hi := versionRange(m.ValidVersions)
	v := min(hi, kmsg.RequestForKey(key).MaxVersion())
	if mx, ok := c.max[key]; ok {
		v = min(v, mx)
	}
	return v
}

// do sends req at the version a Java client would use; its response must
// come back and follow Kafka's schema.
func (c *rawClient) do(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	return c.doAt(req, c.version(req.Key()))
}

func (c *rawClient) doAt(req kmsg.Request, v int16) kmsg.Response {
	c.t.Helper()
	resp, err := c.try(req, v)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// try sends req at version v and checks its response; an error is a broken
// connection (the cluster rejected the request) or a response that does
// not decode.
func (c *rawClient) try(req kmsg.Request, v int16) (kmsg.Response, error) {
	name := kmsg.NameForKey(req.Key())
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		c.conn = conn
	}
	req.SetVersion(v)
	c.corr++
	c.conn.SetDeadline(time.Now().Add(c.wait))
	if _, err := c.conn.Write(c.fmt.AppendRequest(nil, req, c.corr)); err != nil {
		c.conn.Close()
		c.conn = nil
		return nil, fmt.Errorf("%s v%d: %w", name, v, err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		c.conn.Close()
		c.conn = nil
		return nil, fmt.Errorf("%s v%d: no response: %w", name, v, err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.conn, frame); err != nil {
		c.conn.Close()
		c.conn = nil
		return nil, fmt.Errorf("%s v%d: %w", name, v, err)
	}
	if got := int32(binary.BigEndian.Uint32(frame)); got != c.corr {
		return nil, fmt.Errorf("%s v%d: correlation id %d, want %d", name, v, got, c.corr)
	}
	body := frame[4:]
	if req.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			return nil, fmt.Errorf("%s v%d: response header tags %x", name, v, body[:min(len(body), 1)])
		}
		body = body[1:]
	}
	c.check(req.Key(), v, body)
	resp := req.ResponseKind()
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s v%d: kmsg cannot decode the response: %w", name, v, err)
	}
	return resp, nil
}

func (c *rawClient) check(key, v int16, body []byte) {
	c.t.Helper()
	m := c.schemas.Responses[key]
	if m == nil {
		return
	}
	c.checked[fmt.Sprintf("%s v%d", m.Name, v)] = true
	nulls, err := m.decodeBody(v, body)
	if err != nil {
		c.t.Errorf("does not follow Kafka's schema: %v", err)
	}
	for _, n := range nulls {
		n.Path = indexRE.ReplaceAllString(n.Path, "")
		k := fmt.Sprintf("%s v%d", n.Path, v)
		if _, dup := c.nulls[k]; dup {
			continue
		}
		c.nulls[k] = n
		list := strings.HasPrefix(n.Type, "[]") || n.Type == "bytes" || n.Type == "records"
		switch {
		case !n.Nullable:
			c.bad = append(c.bad, fmt.Sprintf("%s v%d: null in a field Kafka's schema does not allow it (%s)", n.Path, v, n.Type))
		case list && !javaTakesNull[n.Path]:
			c.bad = append(c.bad, fmt.Sprintf("%s v%d: null %s (Kafka's brokers send an empty one; kafka-clients does not take a null here)", n.Path, v, n.Type))
		}
	}
	c.flush()
}

// wrong notes an answer Kafka's brokers would not give.
func (c *rawClient) wrong(format string, args ...any) {
	c.t.Helper()
	c.bad = append(c.bad, fmt.Sprintf(format, args...))
	c.flush()
}

func (c *rawClient) flush() {
	c.t.Helper()
	if c.strict {
		for _, b := range c.bad {
			c.t.Error(b)
		}
		c.bad = nil
	}
}

// recordBatch is a v2 batch of values (uncompressed) for producer pid.
func recordBatch(pid int64, epoch int16, seq int32, txn bool, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		body := r.AppendTo(nil)[1:] // Length 0 takes one byte
		r.Length = int32(len(body))
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2,
		LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp:  now, MaxTimestamp: now,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: recs,
	}
	if txn {
		b.Attributes = 0x10
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// javaFlow walks the embedded cluster through what e2e/kafka/java-clients.sh
// makes Kafka's Java clients and tools ask: topics (TopicCommand), configs
// (ConfigCommand), idempotent and transactional produce
// (ProducerPerformance), a share group (ConsoleShareConsumer,
// ShareGroupCommand), consume-transform-produce (TransactionalMessageCopier)
// and read_committed fetches (ConsoleConsumer).
func javaFlow(t *testing.T, c *rawClient) {
	// ---- admin: topics
	meta := kmsg.NewPtrMetadataRequest()
	c.do(meta)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis = 30000
	for _, tp := range []struct {
		name string
		n    int32
	}{{"plain", 3}, {"txn", 1}, {"out", 1}} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tp.name, tp.n, -1
		ct.Topics = append(ct.Topics, rt)
	}
	withCfg := kmsg.NewCreateTopicsRequestTopic()
	withCfg.Topic, withCfg.NumPartitions, withCfg.ReplicationFactor = "configured", 1, -1
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	cfg.Name, cfg.Value = "retention.ms", kmsg.StringPtr("3600000")
	withCfg.Configs = append(withCfg.Configs, cfg)
	ct.Topics = append(ct.Topics, withCfg)
	ctResp := c.do(ct).(*kmsg.CreateTopicsResponse)
	for _, tr := range ctResp.Topics {
		if tr.ErrorCode != 0 {
			t.Fatalf("CreateTopics %s: error %d", tr.Topic, tr.ErrorCode)
		}
	}
	c.do(ct) // again: TOPIC_ALREADY_EXISTS (TopicCommand --if-not-exists)

	meta = kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"plain", "txn", "out"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		meta.Topics = append(meta.Topics, mt)
	}
	mResp := c.do(meta).(*kmsg.MetadataResponse)
	ids := map[string][16]byte{}
	for _, mt := range mResp.Topics {
		ids[*mt.Topic] = mt.TopicID
	}
	if len(mResp.Brokers) == 0 {
		t.Fatal("Metadata: no brokers")
	}
	broker := mResp.Brokers[0].NodeID

	dtp := kmsg.NewPtrDescribeTopicPartitionsRequest()
	dtp.ResponsePartitionLimit = 2000
	for _, n := range []string{"plain", "txn", "out", "configured"} {
		rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
		rt.Topic = n
		dtp.Topics = append(dtp.Topics, rt)
	}
	c.do(dtp)
	dtp.Topics = nil // every topic (TopicCommand --list / --describe)
	c.do(dtp)
	c.do(kmsg.NewPtrDescribeClusterRequest())

	// ---- admin: configs
	dc := kmsg.NewPtrDescribeConfigsRequest()
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
	}{{kmsg.ConfigResourceTypeTopic, "plain"}, {kmsg.ConfigResourceTypeBroker, fmt.Sprint(broker)}, {kmsg.ConfigResourceTypeGroupConfig, "share-g"}} {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = r.typ, r.name
		dc.Resources = append(dc.Resources, rr)
	}
	dc.IncludeSynonyms, dc.IncludeDocumentation = true, true
	c.do(dc)
	iac := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ir := kmsg.NewIncrementalAlterConfigsRequestResource()
	ir.ResourceType, ir.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "share-g"
	ic := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	ic.Name, ic.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	ir.Configs = append(ir.Configs, ic)
	iac.Resources = append(iac.Resources, ir)
	c.do(iac)
	c.do(dc)

	// ---- idempotent producer
	ipid := kmsg.NewPtrInitProducerIDRequest()
	ipid.TransactionTimeoutMillis = 60000
	ip := c.do(ipid).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 {
		t.Fatalf("InitProducerId: error %d", ip.ErrorCode)
	}
	produce := func(txid *string, pid int64, epoch int16, seq int32, txn bool, topic string, partitions ...int32) {
		t.Helper()
		pr := kmsg.NewPtrProduceRequest()
		pr.TransactionID, pr.Acks, pr.TimeoutMillis = txid, -1, 30000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic, pt.TopicID = topic, ids[topic]
		for _, p := range partitions {
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Partition, pp.Records = p, recordBatch(pid, epoch, seq, txn, values(topic, 10)...)
			pt.Partitions = append(pt.Partitions, pp)
		}
		pr.Topics = append(pr.Topics, pt)
		resp := c.do(pr).(*kmsg.ProduceResponse)
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("Produce %s[%d]: error %d", topic, rp.Partition, rp.ErrorCode)
				}
			}
		}
	}
	produce(nil, ip.ProducerID, ip.ProducerEpoch, 0, false, "plain", 0, 1, 2)

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "plain"
	for p := int32(0); p < 3; p++ {
		for _, ts := range []int64{-2, -1} {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp = p, ts
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	lo.Topics = append(lo.Topics, lt)
	c.do(lo)

	// ---- transactions (ProducerPerformance --transactional-id, the copier)
	fcTxn := kmsg.NewPtrFindCoordinatorRequest()
	fcTxn.CoordinatorType, fcTxn.CoordinatorKey, fcTxn.CoordinatorKeys = 1, "txid", []string{"txid"}
	c.do(fcTxn)
	txid := kmsg.StringPtr("txid")
	ipt := kmsg.NewPtrInitProducerIDRequest()
	ipt.TransactionalID, ipt.TransactionTimeoutMillis = txid, 60000
	var tp *kmsg.InitProducerIDResponse
	for range 50 { // the coordinator may still be loading
		tp = c.do(ipt).(*kmsg.InitProducerIDResponse)
		if tp.ErrorCode == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tp.ErrorCode != 0 {
		t.Fatalf("InitProducerId(txid): error %d", tp.ErrorCode)
	}
	pid, epoch := tp.ProducerID, tp.ProducerEpoch
	seqs := map[string]int32{} // per partition, for the current epoch
	txnProduce := func(topic string) {
		t.Helper()
		produce(txid, pid, epoch, seqs[topic], true, topic, 0)
		seqs[topic] += 10
	}
	endTxn := func(commit bool) {
		t.Helper()
		et := kmsg.NewPtrEndTxnRequest()
		et.TransactionalID, et.ProducerID, et.ProducerEpoch, et.Commit = *txid, pid, epoch, commit
		r := c.do(et).(*kmsg.EndTxnResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("EndTxn(commit=%v): error %d", commit, r.ErrorCode)
		}
		if r.Version >= 5 && (r.ProducerID != pid || r.ProducerEpoch != epoch) { // KIP-890: a new epoch at every end
			pid, epoch, seqs = r.ProducerID, r.ProducerEpoch, map[string]int32{}
		}
	}
	// transaction.version 1 clients add partitions first (AddPartitionsToTxn
	// v3 is the newest client version); version 2 ones produce straight away.
	apt := kmsg.NewPtrAddPartitionsToTxnRequest()
	apt.TransactionalID, apt.ProducerID, apt.ProducerEpoch = *txid, pid, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "txn", []int32{0}
	apt.Topics = append(apt.Topics, at)
	c.doAt(apt, min(c.version(apt.Key()), 3))
	txnProduce("txn")
	endTxn(true)
	txnProduce("out")
	aot := kmsg.NewPtrAddOffsetsToTxnRequest()
	aot.TransactionalID, aot.ProducerID, aot.ProducerEpoch, aot.Group = *txid, pid, epoch, "copier"
	c.do(aot)
	fcGroup := kmsg.NewPtrFindCoordinatorRequest()
	fcGroup.CoordinatorKey, fcGroup.CoordinatorKeys = "copier", []string{"copier"}
	c.do(fcGroup)
	toc := kmsg.NewPtrTxnOffsetCommitRequest()
	toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch, toc.Generation = *txid, "copier", pid, epoch, -1
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = "txn"
	tpp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tpp.Partition, tpp.Offset, tpp.LeaderEpoch = 0, 10, -1
	tt.Partitions = append(tt.Partitions, tpp)
	toc.Topics = append(toc.Topics, tt)
	c.do(toc)
	endTxn(true)
	txnProduce("out")
	endTxn(false) // the copier's random aborts

	of := kmsg.NewPtrOffsetFetchRequest()
	of.RequireStable = true
	og := kmsg.NewOffsetFetchRequestGroup()
	og.Group = "copier"
	ot := kmsg.NewOffsetFetchRequestGroupTopic()
	ot.Topic, ot.TopicID, ot.Partitions = "txn", ids["txn"], []int32{0}
	og.Topics = append(og.Topics, ot)
	of.Group, of.Groups = "copier", append(of.Groups, og)
	oft := kmsg.NewOffsetFetchRequestTopic()
	oft.Topic, oft.Partitions = "txn", []int32{0}
	of.Topics = append(of.Topics, oft)
	c.do(of)

	// A group that never committed (the copier's, before its first
	// transaction; ConsoleConsumer --group): Kafka answers offset -1 and no
	// error, at the newest version and at v7 (one group per request).
	for _, v := range []int16{c.version(int16(kmsg.OffsetFetch)), 7} {
		of := kmsg.NewPtrOffsetFetchRequest()
		og := kmsg.NewOffsetFetchRequestGroup()
		og.Group, og.MemberEpoch = "fresh", -1
		ot := kmsg.NewOffsetFetchRequestGroupTopic()
		ot.Topic, ot.TopicID, ot.Partitions = "txn", ids["txn"], []int32{0}
		og.Topics = append(og.Topics, ot)
		of.Group, of.Groups = "fresh", append(of.Groups, og)
		oft := kmsg.NewOffsetFetchRequestTopic()
		oft.Topic, oft.Partitions = "txn", []int32{0}
		of.Topics = append(of.Topics, oft)
		r := c.doAt(of, v).(*kmsg.OffsetFetchResponse)
		code, offset := r.ErrorCode, int64(0)
		if v >= 8 && len(r.Groups) == 1 {
			code = r.Groups[0].ErrorCode
			if ts := r.Groups[0].Topics; len(ts) == 1 && len(ts[0].Partitions) == 1 {
				offset = ts[0].Partitions[0].Offset
			}
		} else if v < 8 && len(r.Topics) == 1 && len(r.Topics[0].Partitions) == 1 {
			offset = r.Topics[0].Partitions[0].Offset
		}
		if code != 0 || offset != -1 {
			c.wrong("OffsetFetchResponse v%d of a group that never committed: error %d, offset %d (Kafka's brokers: no error, offset -1)", v, code, offset)
		}
	}

	// ---- fetches: read_uncommitted and read_committed (ConsoleConsumer)
	for _, iso := range []int8{0, 1} {
		fr := kmsg.NewPtrFetchRequest()
		fr.ReplicaID, fr.MaxWaitMillis, fr.MinBytes, fr.MaxBytes, fr.IsolationLevel = -1, 100, 1, 1<<20, iso
		fr.SessionEpoch = -1
		for _, n := range []string{"plain", "out"} {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = n, ids[n]
			for p := int32(0); p < map[string]int32{"plain": 3, "out": 1}[n]; p++ {
				fp := kmsg.NewFetchRequestTopicPartition()
				fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LastFetchedEpoch = p, 0, 1<<20, -1, -1
				ft.Partitions = append(ft.Partitions, fp)
			}
			fr.Topics = append(fr.Topics, ft)
		}
		c.do(fr)
	}

	// ---- share group (ConsoleShareConsumer, ShareGroupCommand)
	const group = "share-g"
	member := "AAAAAAAAAAAAAAAAAAAAAA"
	fcShare := kmsg.NewPtrFindCoordinatorRequest()
	fcShare.CoordinatorKey, fcShare.CoordinatorKeys = group, []string{group}
	c.do(fcShare)
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = group, member, 0, []string{"plain"}
	var assigned []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition
	for range 50 {
		r := c.do(hb).(*kmsg.ShareGroupHeartbeatResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("ShareGroupHeartbeat: error %d", r.ErrorCode)
		}
		hb.MemberEpoch, hb.SubscribedTopicNames = r.MemberEpoch, nil
		if r.Assignment != nil && len(r.Assignment.TopicPartitions) > 0 {
			assigned = r.Assignment.TopicPartitions
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(assigned) == 0 {
		t.Fatal("ShareGroupHeartbeat: no assignment")
	}
	sf := kmsg.NewPtrShareFetchRequest()
	sf.GroupID, sf.MemberID, sf.ShareSessionEpoch = kmsg.StringPtr(group), kmsg.StringPtr(member), 0
	sf.MaxWaitMillis, sf.MinBytes, sf.MaxBytes, sf.MaxRecords, sf.BatchSize = 200, 1, 1<<20, 500, 500
	for _, a := range assigned {
		st := kmsg.NewShareFetchRequestTopic()
		st.TopicID = a.TopicID
		for _, p := range a.Partitions {
			sp := kmsg.NewShareFetchRequestTopicPartition()
			sp.Partition, sp.PartitionMaxBytes = p, 1<<20
			st.Partitions = append(st.Partitions, sp)
		}
		sf.Topics = append(sf.Topics, st)
	}
	type acquired struct {
		topic     [16]byte
		partition int32
		first     int64
		last      int64
	}
	var got []acquired
	for range 20 { // the records may take a poll or two to show up
		r := c.do(sf).(*kmsg.ShareFetchResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("ShareFetch: error %d", r.ErrorCode)
		}
		sf.ShareSessionEpoch++
		sf.Topics = nil // the session has them
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				for _, ar := range rp.AcquiredRecords {
					got = append(got, acquired{rt.TopicID, rp.Partition, ar.FirstOffset, ar.LastOffset})
				}
			}
		}
		if len(got) > 0 {
			break
		}
	}
	if len(got) == 0 {
		t.Fatal("ShareFetch: no records acquired")
	}
	// acknowledge the first acquired batch in a ShareFetch, the others in a
	// ShareAcknowledge
	ackBatch := func(a acquired) kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
		b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.first, a.last, []int8{1}
		return b
	}
	st := kmsg.NewShareFetchRequestTopic()
	st.TopicID = got[0].topic
	sp := kmsg.NewShareFetchRequestTopicPartition()
	sp.Partition, sp.PartitionMaxBytes = got[0].partition, 1<<20
	sp.AcknowledgementBatches = append(sp.AcknowledgementBatches, ackBatch(got[0]))
	st.Partitions = append(st.Partitions, sp)
	sf.Topics = []kmsg.ShareFetchRequestTopic{st}
	c.do(sf)
	sf.ShareSessionEpoch++
	sa := kmsg.NewPtrShareAcknowledgeRequest()
	sa.GroupID, sa.MemberID, sa.ShareSessionEpoch = sf.GroupID, sf.MemberID, sf.ShareSessionEpoch
	for _, a := range got[1:] {
		at := kmsg.NewShareAcknowledgeRequestTopic()
		at.TopicID = a.topic
		ap := kmsg.NewShareAcknowledgeRequestTopicPartition()
		ap.Partition = a.partition
		b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.first, a.last, []int8{1}
		ap.AcknowledgementBatches = append(ap.AcknowledgementBatches, b)
		at.Partitions = append(at.Partitions, ap)
		sa.Topics = append(sa.Topics, at)
	}
	c.do(sa)

	sgd := kmsg.NewPtrShareGroupDescribeRequest()
	sgd.GroupIDs = []string{group}
	c.do(sgd)
	lg := kmsg.NewPtrListGroupsRequest()
	lg.TypesFilter = []string{"share"}
	c.do(lg)
	dsgo := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	dg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	dg.GroupID = group
	dsgo.Groups = append(dsgo.Groups, dg)
	c.do(dsgo)
	dgt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	dgt.Topic, dgt.Partitions = "plain", []int32{0, 1, 2}
	dsgo.Groups[0].Topics = append(dsgo.Groups[0].Topics, dgt)
	c.do(dsgo)

	sf.ShareSessionEpoch, sf.Topics = -1, nil // close the share session
	c.do(sf)
	hb.MemberEpoch = -1 // leave
	c.do(hb)
}

// sweep sends every key the cluster serves, at every version both it and
// Kafka's schema know, with an empty request: the answers to nothing and the
// error answers must be free of nulls too. A request the cluster rejects (it
// closes the connection) is skipped.
func sweep(t *testing.T, c *rawClient) {
	c.wait = 5 * time.Second
	defer func() { c.wait = 20 * time.Second }()
	keys := make([]int16, 0, len(c.max))
	for k := range c.max {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		m, q := c.schemas.Responses[key], c.schemas.Requests[key]
		if m == nil || q == nil || key == int16(kmsg.SASLHandshake) || key == int16(kmsg.SASLAuthenticate) {
			continue
		}
		lo, hi := versionRange(m.ValidVersions)
		for v := max(lo, c.min[key]); v <= min(hi, c.max[key]); v++ {
			req := kmsg.RequestForKey(key)
			if req == nil || v > req.MaxVersion() {
				continue
			}
			if pr, ok := req.(*kmsg.ProduceRequest); ok {
				pr.Acks = -1 // acks=0 has no response
			}
			if _, err := c.try(req, v); err != nil {
				var ne net.Error
				if errors.Is(err, io.EOF) || errors.As(err, &ne) || strings.Contains(err.Error(), "connection reset") {
					t.Logf("sweep: %v (the cluster rejects an empty request)", err)
					continue
				}
				t.Errorf("sweep: %v", err)
			}
		}
	}
}

// TestEmbeddedClusterForJava checks the embedded cluster's answers to what
// Kafka's Java clients ask against Kafka's own schemas (kafka-clients 4.4):
// no null where the schema forbids one, no null list or byte array anywhere
// Kafka's brokers send an empty one (see javaTakesNull), and the answers
// compatFixes corrects given as Kafka gives them.
func TestEmbeddedClusterForJava(t *testing.T) {
	schemas := requireSchemas(t)
	e, err := StartEmbedded(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newRawClient(t, e.Seeds()[0], schemas, true)
	javaFlow(t, c)
	sweep(t, c)
	var checked []string
	for k := range c.checked {
		checked = append(checked, k)
	}
	slices.Sort(checked)
	t.Logf("%d responses checked: %s", len(checked), strings.Join(checked, ", "))
	for _, n := range c.nulls {
		if n.Type != "string" && !strings.HasPrefix(n.Type, "[]") || javaTakesNull[n.Path] {
			t.Logf("null (allowed): %v", n)
		}
	}
}

// TestEmbeddedClusterUnfixed is the canary of the fix: the cluster
// without compatListen still gives the answers it fixes. If this fails,
// franz-go's kfake no longer does, and that fix can go.
func TestEmbeddedClusterUnfixed(t *testing.T) {
	schemas := requireSchemas(t)
	e, err := StartEmbedded(t.TempDir(), 1, kfake.ListenFn(net.Listen))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newRawClient(t, e.Seeds()[0], schemas, false)
	javaFlow(t, c)
	sweep(t, c)
	want := []string{
		"CreateTopicsResponse.Topics.Configs",
		"DescribeTopicPartitionsResponse.Topics.Partitions.EligibleLeaderReplicas",
		"DescribeTopicPartitionsResponse.Topics.Partitions.LastKnownElr",
		"ShareFetchResponse.Responses.Partitions.Records",
		"DescribeClientQuotasResponse.Entries",
	}
	for _, w := range want {
		found := false
		for _, n := range c.nulls {
			found = found || n.Path == w
		}
		if !found {
			t.Errorf("kfake no longer sends a null %s: drop its fix from compatFixes", w)
		}
	}
	found := false
	for _, b := range c.bad {
		found = found || strings.HasPrefix(b, "OffsetFetchResponse")
	}
	if !found {
		t.Error("kfake now answers OffsetFetch of an unknown group as Kafka does: drop its fix from compatFixes")
	}
	t.Logf("unfixed, the cluster fails the check with:\n%s", strings.Join(c.bad, "\n"))
}

// captureConn is a net.Conn that records what is written to it.
type captureConn struct {
	net.Conn
	out []byte
}

func (c *captureConn) Write(p []byte) (int, error) { c.out = append(c.out, p...); return len(p), nil }

// TestCompatConnPieces: requests read a byte at a time and responses
// written in pieces are still matched and fixed, and a response of a key
// with nothing to fix passes byte for byte.
func TestCompatConnPieces(t *testing.T) {
	inner := &captureConn{}
	c := &compatConn{Conn: inner, pending: map[int32]pendingReq{}}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pieces"))

	of := kmsg.NewPtrOffsetFetchRequest()
	og := kmsg.NewOffsetFetchRequestGroup()
	og.Group, og.MemberEpoch = "fresh", -1
	ot := kmsg.NewOffsetFetchRequestGroupTopic()
	ot.Topic, ot.Partitions = "t", []int32{0, 1}
	og.Topics = append(og.Topics, ot)
	of.Groups = append(of.Groups, og)
	of.SetVersion(9)
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(12)
	in := f.AppendRequest(nil, of, 7)
	in = f.AppendRequest(in, meta, 8)
	for i := range in {
		c.noteRequests(in[i : i+1])
	}

	resp := of.ResponseKind().(*kmsg.OffsetFetchResponse)
	g := kmsg.NewOffsetFetchResponseGroup()
	g.Group, g.ErrorCode = "fresh", kerr.GroupIDNotFound.Code
	resp.Groups = append(resp.Groups, g)
	frame := func(corr int32, r kmsg.Response) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(corr))
		if r.IsFlexible() {
			b = append(b, 0)
		}
		b = r.AppendTo(b)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	mresp := meta.ResponseKind()
	out := append(frame(7, resp), frame(8, mresp)...)
	for _, piece := range [][]byte{out[:3], out[3:10], out[10:]} {
		if n, err := c.Write(piece); err != nil || n != len(piece) {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}

	size := binary.BigEndian.Uint32(inner.out)
	fixed := kmsg.NewPtrOffsetFetchResponse()
	fixed.Version = 9
	if err := fixed.ReadFrom(inner.out[9 : 4+size]); err != nil {
		t.Fatal(err)
	}
	if len(fixed.Groups) != 1 || fixed.Groups[0].ErrorCode != 0 || len(fixed.Groups[0].Topics) != 1 ||
		len(fixed.Groups[0].Topics[0].Partitions) != 2 || fixed.Groups[0].Topics[0].Partitions[1].Offset != -1 {
		t.Fatalf("OffsetFetch not fixed: %+v", fixed.Groups)
	}
	if rest := inner.out[4+size:]; string(rest) != string(frame(8, mresp)) {
		t.Error("the Metadata response was changed")
	}
	if len(c.pending) != 0 || len(c.wbuf) != 0 {
		t.Errorf("left over: %d pending, %d bytes buffered", len(c.pending), len(c.wbuf))
	}
}
