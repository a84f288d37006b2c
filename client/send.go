package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sharetx/sharetx/kip1289"
)

// SendShareAcknowledgementsToTransaction binds acks to the producer's
// current transaction: the proxy stages them and applies them to the share
// group iff the transaction commits. The producer must be inside a
// transaction (BeginTransaction). md names the share group of the consumer
// that polled the records.
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
func (p *Producer) SendShareAcknowledgementsToTransaction(ctx context.Context, acks *ShareAcknowledgements, md ShareGroupMetadata) error {
	if acks == nil {
		return nil
	}
	if err := acks.validate(); err != nil {
		return err
	}
	if acks.Len() == 0 {
		return nil
	}
	if err := checkProducer(p, md); err != nil {
		return err
	}
	if err := p.checkAdvertised(ctx); err != nil {
		return err
	}

	names := acks.topicNames()
	ids, err := p.resolveTopicIDs(ctx, names)
	if err != nil {
		return err
	}
	byID := make(map[[16]byte]string, len(ids))
	for n, id := range ids {
		byID[id] = n
	}

	req := p.newRequest(md)
	req.Topics = acks.requestTopics(names, ids)

	pid, epoch, err := p.ensureTouched(ctx)
	if err != nil {
		return err
	}
	req.ProducerID, req.ProducerEpoch = pid, epoch

	kresp, err := p.request(ctx, req)
	if err != nil {
		return fmt.Errorf("sharetx: TxnShareAcknowledge: %w", err)
	}
	resp, ok := kresp.(*kip1289.TxnShareAcknowledgeResponse)
	if !ok {
		return fmt.Errorf("sharetx: TxnShareAcknowledge: unexpected response type %T", kresp)
	}
	return p.mapResponse(resp, byID)
}

// request sends the call. When outputs of the transaction wait in the
// producer's buffer (transaction version 2), the call asks the proxy to let
// the shadow record ride in their Produce (kip1289 RideProduce) and, as soon
// as the call is written, starts a flush of the buffer (without waiting for
// it): the outputs and the shadow record then reach the broker in one
// Produce, which adds all their partitions to the transaction at once, and
// the proxy answers the call once that Produce is answered. The
// application's own Flush still waits for the outputs.
func (p *Producer) request(ctx context.Context, req *kip1289.TxnShareAcknowledgeRequest) (kmsg.Response, error) {
	p.mu.Lock()
	tv2 := p.tv2
	p.mu.Unlock()
	if !tv2 || !p.toSend() {
		return p.cl.Request(ctx, req)
	}
	req.RideProduce = true
	select { // a stale signal of an earlier call
	case <-p.callWritten:
	default:
	}
	type answer struct {
		resp kmsg.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := p.cl.Request(ctx, req)
		done <- answer{resp, err}
	}()
	t := time.NewTimer(5 * time.Millisecond)
	defer t.Stop()
	select {
	case <-p.callWritten:
	case <-t.C:
	case a := <-done: // answered (or failed) before it was seen written
		return a.resp, a.err
	}
	go p.cl.Flush(ctx) //nolint:errcheck // the application's Flush reports what matters
	a := <-done
	return a.resp, a.err
}

// checkProducer checks, without asking the cluster, that p can bind
// acknowledgements of md's group to its transactions.
func checkProducer(p *Producer, md ShareGroupMetadata) error {
	if p == nil {
		return errors.New("sharetx: nil producer")
	}
	if md.GroupID == "" {
		return errors.New("sharetx: ShareGroupMetadata has no GroupID")
	}
	return nil
}

// newRequest is the request of the producer's transactional id and md's
// member, without topics and producer id.
func (p *Producer) newRequest(md ShareGroupMetadata) *kip1289.TxnShareAcknowledgeRequest {
	txnID := p.txnID
	return &kip1289.TxnShareAcknowledgeRequest{
		APIKey:          p.apiKey,
		TransactionalID: &txnID,
		GroupID:         md.GroupID,
		MemberID:        md.MemberID,
		MemberEpoch:     md.MemberEpoch,
	}
}

func (p *Producer) mapResponse(resp *kip1289.TxnShareAcknowledgeResponse, byID map[[16]byte]string) error {
	var pes PartitionErrors
	mixed := false // partitions that answer other than the top-level code
	for _, t := range resp.Topics {
		name, ok := byID[t.TopicID]
		if !ok {
			name = fmt.Sprintf("topic-id-%x", t.TopicID)
		}
		for _, part := range t.Partitions {
			if part.ErrorCode != resp.ErrorCode {
				mixed = true
			}
			if part.ErrorCode == 0 {
				continue
			}
			pe := PartitionError{Topic: name, TopicID: t.TopicID, Partition: part.Partition, Err: kerr.ErrorForCode(part.ErrorCode)}
			if part.ErrorMessage != nil {
				pe.Message = *part.ErrorMessage
			}
			if errors.Is(pe.Err, kerr.UnknownTopicID) {
				p.forgetTopic(name) // recreated topic: look the id up again next time
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

// checkAdvertised asks the cluster (once per producer, until it succeeds)
// whether it advertises the TxnShareAcknowledge key; only sharetx does.
func (p *Producer) checkAdvertised(ctx context.Context) error {
	p.mu.Lock()
	ok := p.checked
	p.mu.Unlock()
	if ok {
		return nil
	}
	kresp, err := p.cl.Request(ctx, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return fmt.Errorf("sharetx: ApiVersions: %w", err)
	}
	resp := kresp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("sharetx: ApiVersions: %w", err)
	}
	if !advertises(resp, p.apiKey) {
		return &errNotAdvertised{key: p.apiKey}
	}
	tv2 := usesTV2(resp, p.cl)
	p.mu.Lock()
	p.checked, p.tv2 = true, tv2
	p.mu.Unlock()
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

// resolveTopicIDs maps topic names to ids from the producer's cache; a miss
// refreshes the missing topics once with a metadata request.
func (p *Producer) resolveTopicIDs(ctx context.Context, topics []string) (map[string][16]byte, error) {
	out := make(map[string][16]byte, len(topics))
	var missing []string
	p.mu.Lock()
	for _, t := range topics {
		if id, ok := p.topicIDs[t]; ok {
			out[t] = id
		} else {
			missing = append(missing, t)
		}
	}
	p.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}

	resp, err := requestMetadata(ctx, p.cl, missing)
	if err != nil {
		return nil, err
	}
	problems := make(map[string]string)
	p.mu.Lock()
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
			p.topicIDs[*t.Topic] = t.TopicID
		}
	}
	for _, t := range missing {
		if id, ok := p.topicIDs[t]; ok {
			out[t] = id
		} else if _, ok := problems[t]; !ok {
			problems[t] = "not in the metadata response"
		}
	}
	p.mu.Unlock()
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

func (p *Producer) forgetTopic(topic string) {
	p.mu.Lock()
	delete(p.topicIDs, topic)
	p.mu.Unlock()
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
