package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sharetx/sharetx/kip1289"
)

const (
	// TouchValue and TouchHeader mark the touch record a transaction's
	// first SendShareAcknowledgementsToTransaction produces to the shadow
	// topic; the proxy ignores such records.
	TouchValue  = "sharetx-touch"
	TouchHeader = "sharetx" // header value "touch"

	shadowCacheTTL   = time.Minute
	shadowWaitMax    = 10 * time.Second
	shadowWaitBackof = 200 * time.Millisecond
)

// clientState is what the package remembers per kgo.Client.
type clientState struct {
	mu       sync.Mutex
	checked  bool // the cluster advertises the key
	tv2      bool // transaction version 2 is in use
	topicIDs map[string][16]byte
	shadowN  int32
	shadowAt time.Time
	owned    bool       // a TransactionalShareAcknowledger owns the client's transactions
	touchMu  sync.Mutex // serializes touches
}

var states sync.Map // weak.Pointer[kgo.Client] -> *clientState

func stateFor(cl *kgo.Client) *clientState {
	wp := weak.Make(cl)
	if v, ok := states.Load(wp); ok {
		return v.(*clientState)
	}
	v, loaded := states.LoadOrStore(wp, &clientState{topicIDs: make(map[string][16]byte)})
	if !loaded {
		runtime.AddCleanup(cl, func(wp weak.Pointer[kgo.Client]) { states.Delete(wp) }, wp)
	}
	return v.(*clientState)
}

// SendShareAcknowledgementsToTransaction binds acks to producer's current
// transaction: the proxy stages them and applies them to the share group iff
// the transaction commits. producer must be transactional, built with
// ClientOpts, connected through sharetx, and inside a transaction
// (BeginTransaction). md names the share group of the consumer that polled
// the records.
//
// Empty acks are a no-op. Invalid acks (types other than Accept / Reject,
// records without topic) fail without sending anything.
//
// Unless the transaction already produced a record or has records buffered
// (under transaction version 2), the first call in a transaction also
// produces one small touch record to the shadow topic so the transaction is
// never empty in franz-go's eyes (see the package documentation). So the
// fastest order is: Produce the outputs (asynchronously), call this while
// they are in flight, then Flush and EndTransaction: the proxy's shadow
// write overlaps the produce. On a *PartitionErrors error nothing of this
// call was staged. On any error the application should normally abort the
// transaction and call ReleaseForRedelivery.
func SendShareAcknowledgementsToTransaction(ctx context.Context, producer *kgo.Client, acks *ShareAcknowledgements, md ShareGroupMetadata) error {
	if acks == nil {
		return nil
	}
	if err := acks.validate(); err != nil {
		return err
	}
	if acks.Len() == 0 {
		return nil
	}
	txnID, cfg, err := checkProducer(producer, md)
	if err != nil {
		return err
	}

	st := stateFor(producer)
	if err := st.checkAdvertised(ctx, producer, cfg.apiKey); err != nil {
		return err
	}

	tbs := acks.batches()
	names := make([]string, len(tbs))
	for i, tb := range tbs {
		names[i] = tb.topic
	}
	ids, err := st.resolveTopicIDs(ctx, producer, names)
	if err != nil {
		return err
	}
	byID := make(map[[16]byte]string, len(ids))
	for n, id := range ids {
		byID[id] = n
	}

	req := buildRequest(cfg.apiKey, txnID, md, tbs, ids)

	pid, epoch, err := st.ensureTouched(ctx, producer, cfg, txnID)
	if err != nil {
		return err
	}
	req.ProducerID, req.ProducerEpoch = pid, epoch

	kresp, err := producer.Request(ctx, req)
	if err != nil {
		return fmt.Errorf("sharetx: TxnShareAcknowledge: %w", err)
	}
	resp, ok := kresp.(*kip1289.TxnShareAcknowledgeResponse)
	if !ok {
		return fmt.Errorf("sharetx: TxnShareAcknowledge: unexpected response type %T", kresp)
	}
	return st.mapResponse(resp, byID)
}

// checkProducer checks that producer can bind acknowledgements to its
// transactions through sharetx (without asking the cluster) and returns its
// transactional id and sharetx configuration.
func checkProducer(producer *kgo.Client, md ShareGroupMetadata) (string, *config, error) {
	if producer == nil {
		return "", nil, errors.New("sharetx: nil producer")
	}
	if md.GroupID == "" {
		return "", nil, errors.New("sharetx: ShareGroupMetadata has no GroupID")
	}
	txnID, _ := producer.OptValue(kgo.TransactionalID).(string)
	if txnID == "" {
		return "", nil, errors.New("sharetx: the producer is not transactional (kgo.TransactionalID)")
	}
	cfg := configOf(producer)
	if cfg == nil {
		return "", nil, errors.New("sharetx: the producer was not built with client.ClientOpts (or kgo.RecordPartitioner was set after them; use client.Partitioner)")
	}
	if vs, _ := producer.OptValue(kgo.MaxVersions).(*kversion.Versions); vs != nil && !vs.HasKey(cfg.apiKey) {
		return "", nil, fmt.Errorf("sharetx: the producer's version table lacks TxnShareAcknowledge (key %d): kgo.MaxVersions was set after client.ClientOpts; use client.MaxVersions", cfg.apiKey)
	}
	return txnID, cfg, nil
}

func buildRequest(key int16, txnID string, md ShareGroupMetadata, tbs []topicBatches, ids map[string][16]byte) *kip1289.TxnShareAcknowledgeRequest {
	req := &kip1289.TxnShareAcknowledgeRequest{
		APIKey:          key,
		TransactionalID: &txnID,
		GroupID:         md.GroupID,
		MemberID:        md.MemberID,
		MemberEpoch:     md.MemberEpoch,
	}
	for _, tb := range tbs {
		t := kip1289.TxnShareAcknowledgeTopic{TopicID: ids[tb.topic]}
		for _, pb := range tb.partitions {
			p := kip1289.TxnShareAcknowledgePartition{Partition: pb.partition}
			for _, b := range pb.batches {
				p.AcknowledgementBatches = append(p.AcknowledgementBatches, kip1289.TxnShareAcknowledgeBatch{
					FirstOffset:      b.first,
					LastOffset:       b.last,
					AcknowledgeTypes: b.types,
				})
			}
			t.Partitions = append(t.Partitions, p)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}

func (s *clientState) mapResponse(resp *kip1289.TxnShareAcknowledgeResponse, byID map[[16]byte]string) error {
	var pes PartitionErrors
	mixed := false // partitions that answer other than the top-level code
	for _, t := range resp.Topics {
		name, ok := byID[t.TopicID]
		if !ok {
			name = fmt.Sprintf("topic-id-%x", t.TopicID)
		}
		for _, p := range t.Partitions {
			if p.ErrorCode != resp.ErrorCode {
				mixed = true
			}
			if p.ErrorCode == 0 {
				continue
			}
			pe := PartitionError{Topic: name, TopicID: t.TopicID, Partition: p.Partition, Err: kerr.ErrorForCode(p.ErrorCode)}
			if p.ErrorMessage != nil {
				pe.Message = *p.ErrorMessage
			}
			if errors.Is(pe.Err, kerr.UnknownTopicID) {
				s.forgetTopic(name) // recreated topic: look the id up again next time
			}
			pes.Errors = append(pes.Errors, pe)
		}
	}
	if resp.ErrorCode != 0 && !mixed {
		// The whole call refused: the reference layout has no top-level
		// message, so sharetx repeats the code and message on the
		// partitions.
		err := kerr.ErrorForCode(resp.ErrorCode)
		for _, pe := range pes.Errors {
			if pe.Message != "" {
				return fmt.Errorf("sharetx: TxnShareAcknowledge: %w: %s", err, pe.Message)
			}
		}
		return fmt.Errorf("sharetx: TxnShareAcknowledge: %w", err)
	}
	if len(pes.Errors) > 0 {
		return &pes // the top-level code, if any, is one of theirs
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("sharetx: TxnShareAcknowledge: %w", kerr.ErrorForCode(resp.ErrorCode))
	}
	return nil
}

// checkAdvertised asks the cluster (once per client, until it succeeds)
// whether it advertises the TxnShareAcknowledge key; only sharetx does.
func (s *clientState) checkAdvertised(ctx context.Context, cl *kgo.Client, key int16) error {
	s.mu.Lock()
	ok := s.checked
	s.mu.Unlock()
	if ok {
		return nil
	}
	kresp, err := cl.Request(ctx, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return fmt.Errorf("sharetx: ApiVersions: %w", err)
	}
	resp := kresp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("sharetx: ApiVersions: %w", err)
	}
	if !advertises(resp, key) {
		return &errNotAdvertised{key: key}
	}
	tv2 := usesTV2(resp, cl)
	s.mu.Lock()
	s.checked, s.tv2 = true, tv2
	s.mu.Unlock()
	return nil
}

func advertises(resp *kmsg.ApiVersionsResponse, key int16) bool {
	for _, k := range resp.ApiKeys {
		if k.ApiKey == key && k.MinVersion <= 0 && k.MaxVersion >= 0 {
			return true
		}
	}
	return false
}

// usesTV2 mirrors kgo's KIP-890 part 2 decision: under transaction version 2
// every EndTxn bumps the producer epoch, so (producer id, epoch) identifies a
// transaction. Without it the client touches on every call.
func usesTV2(resp *kmsg.ApiVersionsResponse, cl *kgo.Client) bool {
	level := int16(0)
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			level = f.MaxVersionLevel
		}
	}
	if level < 2 {
		return false
	}
	if vs, _ := cl.OptValue(kgo.MaxVersions).(*kversion.Versions); vs != nil {
		for k, min := range map[kmsg.Key]int16{kmsg.Produce: 12, kmsg.EndTxn: 5, kmsg.TxnOffsetCommit: 5} {
			if v, ok := vs.LookupMaxKeyVersion(int16(k)); !ok || v < min {
				return false
			}
		}
	}
	return true
}

// resolveTopicIDs maps topic names to ids from the per-client cache; a miss
// refreshes the missing topics once with a metadata request.
func (s *clientState) resolveTopicIDs(ctx context.Context, cl *kgo.Client, topics []string) (map[string][16]byte, error) {
	out := make(map[string][16]byte, len(topics))
	var missing []string
	s.mu.Lock()
	for _, t := range topics {
		if id, ok := s.topicIDs[t]; ok {
			out[t] = id
		} else {
			missing = append(missing, t)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}

	resp, err := requestMetadata(ctx, cl, missing)
	if err != nil {
		return nil, err
	}
	problems := make(map[string]string)
	s.mu.Lock()
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		switch {
		case t.ErrorCode != 0:
			problems[*t.Topic] = kerr.ErrorForCode(t.ErrorCode).Error()
		case t.TopicID == [16]byte{}:
			problems[*t.Topic] = "the cluster returned no topic id"
		default:
			s.topicIDs[*t.Topic] = t.TopicID
		}
	}
	for _, t := range missing {
		if id, ok := s.topicIDs[t]; ok {
			out[t] = id
		} else if _, ok := problems[t]; !ok {
			problems[t] = "not in the metadata response"
		}
	}
	s.mu.Unlock()
	if len(problems) > 0 {
		list := make([]string, 0, len(problems))
		for t, p := range problems {
			list = append(list, t+": "+p)
		}
		sort.Strings(list)
		return nil, fmt.Errorf("sharetx: resolving topic ids: %s", strings.Join(list, "; "))
	}
	return out, nil
}

func (s *clientState) forgetTopic(topic string) {
	s.mu.Lock()
	delete(s.topicIDs, topic)
	s.mu.Unlock()
}

func requestMetadata(ctx context.Context, cl *kgo.Client, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("sharetx: metadata: %w", err)
	}
	return resp, nil
}

// shadowPartitions returns the partition count of the shadow topic, waiting
// briefly for the proxy to create it.
func (s *clientState) shadowPartitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	s.mu.Lock()
	n, at := s.shadowN, s.shadowAt
	s.mu.Unlock()
	if n > 0 && time.Since(at) < shadowCacheTTL {
		return n, nil
	}
	deadline := time.Now().Add(shadowWaitMax)
	for {
		resp, err := requestMetadata(ctx, cl, []string{topic})
		if err != nil {
			return 0, err
		}
		var lastErr error = fmt.Errorf("sharetx: shadow topic %q is missing from metadata", topic)
		for _, t := range resp.Topics {
			if t.Topic == nil || *t.Topic != topic {
				continue
			}
			if t.ErrorCode != 0 {
				lastErr = fmt.Errorf("sharetx: shadow topic %q: %w", topic, kerr.ErrorForCode(t.ErrorCode))
				break
			}
			if len(t.Partitions) == 0 {
				break
			}
			n := int32(len(t.Partitions))
			s.mu.Lock()
			s.shadowN, s.shadowAt = n, time.Now()
			s.mu.Unlock()
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, lastErr
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%w)", lastErr, ctx.Err())
		case <-time.After(shadowWaitBackof):
		}
	}
}

// ensureTouched makes sure the producer's current transaction contains a
// record, so that kgo's EndTransaction really sends EndTxn (kgo skips EndTxn
// when nothing was produced). Under transaction version 2 a transaction that
// already produced a record successfully needs nothing more; otherwise it
// produces one touch record per transaction. It returns the producer id and
// epoch to stage the acknowledgements with.
func (s *clientState) ensureTouched(ctx context.Context, cl *kgo.Client, cfg *config, txnID string) (int64, int16, error) {
	s.touchMu.Lock()
	defer s.touchMu.Unlock()

	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("sharetx: producer id: %w", err)
	}
	s.mu.Lock()
	tv2 := s.tv2
	s.mu.Unlock()
	// A record produced in this transaction (the touch record included), or
	// records buffered or in flight now: those belong to this transaction
	// (kgo refuses produces outside one, and EndTransaction must follow a
	// Flush); once one succeeds kgo sends EndTxn; if all fail, kgo aborts
	// (TV2), and the staged acks with it.
	done := tv2 && (cfg.producedIn(pid, epoch) || cl.BufferedProduceRecords() > 0)
	if done {
		return pid, epoch, nil
	}

	n, err := s.shadowPartitions(ctx, cl, cfg.shadowTopic)
	if err != nil {
		return 0, 0, err
	}
	if n < 2 {
		return 0, 0, fmt.Errorf("sharetx: shadow topic %q has %d partition(s); it needs at least 2 so the touch record never shares a partition with the proxy's shadow records", cfg.shadowTopic, n)
	}
	p := touchPartitionFor(txnID, n)
	r := &kgo.Record{
		Topic:     cfg.shadowTopic,
		Partition: p,
		Value:     []byte(TouchValue),
		Headers:   []kgo.RecordHeader{{Key: TouchHeader, Value: []byte("touch")}},
	}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return 0, 0, fmt.Errorf("sharetx: producing the transaction's touch record to %s[%d] (is the producer in a transaction?): %w", cfg.shadowTopic, p, err)
	}
	if r.Partition != p {
		return 0, 0, fmt.Errorf("sharetx: the touch record landed on %s[%d] instead of partition %d: the client's partitioner was replaced", cfg.shadowTopic, r.Partition, p)
	}
	// The produce hook noted the touch: later calls of this transaction
	// find producedIn(pid, epoch).
	if pid, epoch, err = cl.ProducerID(ctx); err != nil {
		return 0, 0, fmt.Errorf("sharetx: producer id: %w", err)
	}
	return pid, epoch, nil
}
