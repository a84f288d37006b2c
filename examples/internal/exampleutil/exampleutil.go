// Package exampleutil is what the Go examples need besides the pattern they
// show: --seed (topics, the group's start offset, inputs), Ctrl-C, progress.
package exampleutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Seed creates the input topic (3 partitions) and any output topics (1
// partition), makes the share group read from the start (a share group
// starts at the latest offset unless told otherwise) and produces n input
// records prefix-0... (key and value alike).
func Seed(ctx context.Context, bootstrap, group, input, prefix string, n int, outputs ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(input))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for i, t := range append([]string{input}, outputs...) {
		parts := int32(1)
		if i == 0 {
			parts = 3
		}
		resp, err := adm.CreateTopic(ctx, parts, -1, nil, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", t, err)
		}
	}
	// kadm alters topic and broker configurations only: a group's is an
	// IncrementalAlterConfigs of resource type GROUP.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		for _, r := range resp.Resources {
			err = errors.Join(err, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if err != nil {
		return fmt.Errorf("share.auto.offset.reset of group %s: %w", group, err)
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := fmt.Appendf(nil, "%s-%d", prefix, i)
		recs[i] = &kgo.Record{Key: v, Value: v}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing the inputs: %w", err)
	}
	fmt.Printf("seeded %d records into %s\n", n, input)
	return nil
}

// Interruptible is a context that ends on Ctrl-C or SIGTERM: the examples
// finish the transaction at hand, close their clients and print their
// summary.
func Interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
