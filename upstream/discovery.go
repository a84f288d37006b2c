package upstream

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sharetx/sharetx/configs"
)

// Broker is one upstream broker as the cluster describes it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   *string
}

func (b Broker) Addr() string { return fmt.Sprintf("%s:%d", b.Host, b.Port) }

// Client is the proxy's own connection to the cluster, used to discover
// brokers and, later, to administer the shadow topic.
type Client struct {
	*kgo.Client
}

// NewClient connects to the cluster's bootstrap servers through d, with the
// proxy's own SASL identity if one is configured.
func NewClient(seeds []string, d *Dialer, auth configs.SASL, opts ...kgo.Opt) (*Client, error) {
	cl, err := kgo.NewClient(append(ClientOpts(seeds, d, auth), opts...)...)
	if err != nil {
		return nil, err
	}
	return &Client{cl}, nil
}

// ClientOpts are the options of every client the proxy itself runs against
// the cluster: seeds, dialer (TLS) and its own SASL identity.
func ClientOpts(seeds []string, d *Dialer, auth configs.SASL) []kgo.Opt {
	all := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.Dialer(d.DialContext), kgo.ClientID("sharetx")}
	switch auth.Mechanism {
	case "PLAIN":
		all = append(all, kgo.SASL(plain.Auth{User: auth.Username, Pass: auth.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		all = append(all, kgo.SASL(scram.Auth{User: auth.Username, Pass: auth.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		all = append(all, kgo.SASL(scram.Auth{User: auth.Username, Pass: auth.Password}.AsSha512Mechanism()))
	}
	return all
}

// Discover returns the cluster's brokers and its ApiVersions answer.
func (c *Client) Discover(ctx context.Context) ([]Broker, *kmsg.ApiVersionsResponse, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{} // no topics: brokers only
	mresp, err := mreq.RequestWith(ctx, c.Client)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	brokers := make([]Broker, 0, len(mresp.Brokers))
	for _, b := range mresp.Brokers {
		brokers = append(brokers, Broker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
	}
	vreq := kmsg.NewPtrApiVersionsRequest()
	vreq.ClientSoftwareName = "sharetx"
	vreq.ClientSoftwareVersion = "0"
	vresp, err := vreq.RequestWith(ctx, c.Client)
	if err != nil {
		return brokers, nil, fmt.Errorf("api versions: %w", err)
	}
	return brokers, vresp, nil
}
