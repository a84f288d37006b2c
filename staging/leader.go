package staging

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the shadow writer asks the shadow partition's leader.

// checkProduceVersion asks node once for its ApiVersions and checks Produce
// v12+.
func (w *Writer) checkProduceVersion(ctx context.Context, node int32) error {
	w.mu.Lock()
	ok, known := w.produceOK[node]
	w.mu.Unlock()
	if known {
		if !ok {
			return ErrProduceVersion
		}
		return nil
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "sharetx"
	req.ClientSoftwareVersion = "1"
	kresp, err := w.cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	ok = false
	for _, k := range resp.ApiKeys {
		if k.ApiKey == 0 && k.MaxVersion >= 12 {
			ok = true
		}
	}
	w.mu.Lock()
	w.produceOK[node] = ok
	w.mu.Unlock()
	if !ok {
		return ErrProduceVersion
	}
	return nil
}

// lastSequence returns the last sequence the partition leader holds for
// pid at epoch on partition p, or -1 if it holds none for that epoch.
func (w *Writer) lastSequence(ctx context.Context, pid int64, epoch int16, p int32) (int32, error) {
	var lastErr error
attempts:
	for i := 0; i < 6; i++ {
		if i > 0 {
			if err := sleep(ctx, time.Duration(50*i)*time.Millisecond); err != nil {
				return 0, err
			}
			w.refreshMetadata(ctx) //nolint:errcheck // the lookup below reports it
		}
		w.mu.Lock()
		leader, ok := w.leaders[p]
		w.mu.Unlock()
		if !ok {
			if _, err := w.refreshMetadata(ctx); err != nil {
				lastErr = err
				continue
			}
			w.mu.Lock()
			leader, ok = w.leaders[p]
			w.mu.Unlock()
			if !ok {
				lastErr = kerr.UnknownTopicOrPartition
				continue
			}
		}
		req := kmsg.NewPtrDescribeProducersRequest()
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic = w.topic
		rt.Partitions = []int32{p}
		req.Topics = append(req.Topics, rt)
		kresp, err := w.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		for _, t := range kresp.(*kmsg.DescribeProducersResponse).Topics {
			for _, tp := range t.Partitions {
				if tp.Partition != p {
					continue
				}
				if err := kerr.ErrorForCode(tp.ErrorCode); err != nil {
					lastErr = err
					if retriable(err) {
						continue attempts
					}
					return 0, fmt.Errorf("DescribeProducers: %w", err)
				}
				for _, ap := range tp.ActiveProducers {
					if ap.ProducerID == pid && ap.ProducerEpoch == int32(epoch) && ap.LastSequence >= 0 {
						return ap.LastSequence, nil
					}
				}
				return -1, nil
			}
		}
		lastErr = errors.New("DescribeProducers response is missing the partition")
	}
	return 0, fmt.Errorf("DescribeProducers: %w", lastErr)
}
