// Package configs holds sharetx's configuration: the YAML schema, its
// defaults, the SHARETX_* environment overrides and the validation that
// stops start-up with a message naming the key and the fix.
//
// Every key of the YAML file can also be set by an environment variable whose
// name is SHARETX_ followed by the key's path in upper case, joined by
// underscores: listen.advertised_host is SHARETX_LISTEN_ADVERTISED_HOST.
// Lists are comma separated; maps are written "k=v,k=v".
package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole configuration of one sharetx process.
type Config struct {
	Listen   Listen   `yaml:"listen"`
	Upstream Upstream `yaml:"upstream"`
	Limits   Limits   `yaml:"limits"`
	Timeouts Timeouts `yaml:"timeouts"`
	Metrics  Metrics  `yaml:"metrics"`
	Log      Log      `yaml:"log"`
	Embedded Embedded `yaml:"embedded"`
	KIP1289  KIP1289  `yaml:"kip1289"`
}

// KIP1289 configures transactional share-group acknowledgements.
type KIP1289 struct {
	// APIKey of TxnShareAcknowledge. Kafka 4.4 uses 93 and 94 (the KIP's
	// draft numbers), so the default is 95; start-up fails if the cluster
	// advertises the key itself.
	APIKey int `yaml:"api_key"`
	// ShadowTopic holds staged acknowledgements (created when missing).
	ShadowTopic       string `yaml:"shadow_topic"`
	ShadowPartitions  int    `yaml:"shadow_partitions"`
	ShadowReplication int    `yaml:"shadow_replication"` // -1: the broker default
	// MaxPendingRecords bounds the records held TX_PENDING or committed
	// and not yet applied; past it TxnShareAcknowledge is refused with
	// TRANSACTION_ABORTABLE (the held records belong to other transactions,
	// which may take minutes: a retriable code would hold the caller's
	// commit or abort back).
	MaxPendingRecords int `yaml:"max_pending_records"`
	// NotReadyRetryFor bounds how long after start TxnShareAcknowledge is
	// answered COORDINATOR_NOT_AVAILABLE (retriable) while the shadow topic
	// is not ready; after it, TRANSACTION_ABORTABLE. The KIP's client
	// retries a retriable code without limit, ahead of its EndTxn, so a
	// shadow topic that cannot be created must not hold its commit or abort
	// back.
	NotReadyRetryFor time.Duration `yaml:"not_ready_retry_for"`
	// ClientAcks of TX_PENDING or committed offsets: "absorb" answers them
	// as successful without forwarding (franz-go's share consumer accepts
	// the previous poll implicitly); "reject" answers INVALID_RECORD_STATE.
	ClientAcks string `yaml:"client_acks"`
	// ProxyID names this process in the shadow records; empty: host-pid.
	ProxyID string `yaml:"proxy_id"`
	// ShadowKeyFile holds the secret (at least 32 bytes) every sharetx
	// process of the cluster shares; shadow records are signed with a key
	// derived from it, and records that do not verify change nothing.
	// Empty: derived from the proxy's own upstream credentials.
	ShadowKeyFile string `yaml:"shadow_key_file"`
	// MaxOffsetsPerCall bounds the offsets one TxnShareAcknowledge may
	// stage; MaxPartitionsPerCall the partitions it may name.
	MaxOffsetsPerCall    int `yaml:"max_offsets_per_call"`
	MaxPartitionsPerCall int `yaml:"max_partitions_per_call"`
	// CloseHold bounds how long a member's share session is kept open after
	// the client closed it (or its connection) while acknowledgements are
	// staged or committed and not yet applied. Match the producers'
	// transaction timeout.
	CloseHold time.Duration `yaml:"close_hold"`
	// AckRideWait is how long the acknowledgements of a committed
	// transaction (and the releases of an aborted one) wait for the
	// member's next ShareFetch to carry them, instead of a ShareAcknowledge
	// of the proxy's own that the member's next request would wait behind.
	// 0: always on their own.
	AckRideWait time.Duration `yaml:"ack_ride_wait"`
	// WholeBatchWait is how long the committed acknowledgements of part of
	// a batch the broker handed out whole wait for the rest of that batch
	// to be committed, so that the broker takes the batch whole (it keeps
	// state per offset for a batch acknowledged in parts). 0: never wait.
	WholeBatchWait time.Duration `yaml:"whole_batch_wait"`
	// ConcurrentTxnRetry is how long the proxy asks again, on the
	// client's own connection, when the coordinator answers a client's
	// AddPartitionsToTxn (v0-v3: librdkafka, clients before transaction
	// version 2) CONCURRENT_TRANSACTIONS because the previous transaction's
	// markers are still being written; the client gets the first other
	// answer, or CONCURRENT_TRANSACTIONS when this is spent (librdkafka
	// then waits 20 ms). 0: pass the answer on at once.
	ConcurrentTxnRetry time.Duration `yaml:"concurrent_transactions_retry"`
	// RecoveryLookback is how far back in the shadow topic a starting proxy
	// reads (by record timestamp) to learn which acknowledgements are staged
	// or committed, so it can screen redelivered records. A committed
	// acknowledgement that was never applied and whose record is not
	// redelivered within this window is not recognised afterwards.
	RecoveryLookback time.Duration `yaml:"recovery_lookback"`
	// LearnOwnerFromProduce: a principal whose transactional Produce the
	// broker accepted may use that transactional id through the proxy (to
	// stage into its transaction), as after an InitProducerId or EndTxn of
	// its own. Apache Kafka authorises WRITE on the transactional id of
	// every transactional Produce (KafkaApis.handleProduceRequest), so a
	// restarted proxy learns a running transaction from its next write.
	// Set false in front of a broker that does not authorise the id on
	// Produce: ownership is then learned only from InitProducerId and
	// EndTxn (a restarted proxy answers a running transaction's first
	// TxnShareAcknowledge TRANSACTION_ABORTABLE, and learns it from that
	// transaction's EndTxn). The embedded cluster (franz-go's kfake) does
	// not authorise it, and sharetx sets false in front of it itself.
	LearnOwnerFromProduce bool `yaml:"learn_owner_from_produce"`
	// OAuthBearerSubClaim is the claim of an OAUTHBEARER token that names
	// its principal (User:<claim>): the cluster's
	// sasl.oauthbearer.sub.claim.name, "sub" unless it names another.
	OAuthBearerSubClaim string `yaml:"oauthbearer_sub_claim"`
	// GSSAPIPrincipal: every connection the broker accepted through GSSAPI
	// (Kerberos) is this principal ("User:app"). The proxy cannot read a
	// Kerberos principal from the exchange; set this only for a sidecar
	// whose listener nothing but its own application reaches (one
	// principal), as it trusts exactly that. Empty: each GSSAPI connection
	// is an identity of its own (TxnShareAcknowledge then refuses calls
	// naming another connection's transaction or acquisitions).
	GSSAPIPrincipal string `yaml:"gssapi_principal"`
}

// Listen is the client-facing side: where clients connect and what address
// the proxy advertises in every broker-naming response.
type Listen struct {
	// Bootstrap is the host:port of the bootstrap listener, the address
	// clients put in bootstrap.servers.
	Bootstrap string `yaml:"bootstrap"`
	// AdvertisedHost is the host name written into Metadata,
	// FindCoordinator, DescribeCluster and NodeEndpoints. Empty: the host
	// of Bootstrap (which then must not be a wildcard address).
	AdvertisedHost string `yaml:"advertised_host"`
	// BrokerPortBase: upstream node N is served on port BrokerPortBase+N,
	// unless BrokerPorts names it. 0 picks a free port per broker (tests).
	BrokerPortBase int `yaml:"broker_port_base"`
	// BrokerPorts fixes the port of individual node ids.
	BrokerPorts map[int32]int `yaml:"broker_ports"`
	// TLS for clients connecting to the proxy.
	TLS ServerTLS `yaml:"tls"`
}

// ServerTLS is TLS on the listeners.
type ServerTLS struct {
	Enabled      bool   `yaml:"enabled"`
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"` // set: clients must present a certificate signed by it
}

// Upstream is the real cluster behind the proxy.
type Upstream struct {
	// BootstrapServers of the real cluster. Empty: sharetx starts an
	// embedded single-node cluster (see Embedded).
	BootstrapServers []string  `yaml:"bootstrap_servers"`
	TLS              ClientTLS `yaml:"tls"`
	// SASL is the proxy's own identity, for its own requests (broker
	// discovery). Clients' SASL exchanges pass through untouched and
	// authenticate the clients themselves.
	SASL        SASL          `yaml:"sasl"`
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MetadataRefresh is how often the proxy asks the cluster for its
	// brokers, to open listeners for new ones.
	MetadataRefresh time.Duration `yaml:"metadata_refresh"`
}

// ClientTLS is TLS from the proxy to the brokers. Verification is on unless
// InsecureSkipVerify is set.
type ClientTLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL credentials of the proxy's own client.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // empty (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
}

// Limits bound what clients can tie up in the proxy: per connection, and
// connections per process.
type Limits struct {
	// MaxFrameBytes is the largest request or response frame accepted
	// (Kafka's socket.request.max.bytes defaults to 100 MiB).
	MaxFrameBytes int `yaml:"max_frame_bytes"`
	// MaxInFlight is how many requests one client connection may have
	// waiting for responses before the proxy stops reading from it.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxConnections caps the client connections open at once, over all
	// listeners; past it a new connection is closed as soon as it is
	// accepted.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerSource caps the client connections open at once from
	// one source address (its IP); past it a new connection from there is
	// closed as soon as it is accepted.
	MaxConnectionsPerSource int `yaml:"max_connections_per_source"`
	// MaxConnectionsPerPrincipal caps the client connections open at once
	// that authenticated (SASL) as one principal; past it a connection is
	// closed once its authentication is answered.
	MaxConnectionsPerPrincipal int `yaml:"max_connections_per_principal"`
	// MaxBufferedResponseBytes bounds, per connection, the bytes of
	// responses read from the broker and not yet written to the client;
	// at it the proxy stops reading from the broker until the client reads
	// (it reads on while below it: at most the limit plus one response).
	MaxBufferedResponseBytes int `yaml:"max_buffered_response_bytes"`
	// MaxDecodedRequestBytes bounds the requests the proxy decodes whole
	// (the share-group and transaction requests it intercepts, not
	// Produce); a larger one closes the connection.
	MaxDecodedRequestBytes int `yaml:"max_decoded_request_bytes"`
	// MaxProcs is how many CPUs the proxy's Go code runs on at once
	// (runtime.GOMAXPROCS); 0 leaves it to Go: every CPU of the machine,
	// or the container's CPU limit. The GOMAXPROCS environment variable,
	// when set, wins over it.
	MaxProcs int `yaml:"max_procs"`
}

// Timeouts of the proxy itself.
type Timeouts struct {
	// ShutdownGrace bounds how long in-flight requests may take to finish
	// after SIGTERM.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// ClientIdle closes a client connection that sent nothing for this long
	// and has nothing in flight; 0 never does (Kafka's default is 10m).
	ClientIdle time.Duration `yaml:"client_idle"`
	// ClientAuthenticate closes a client connection that has not sent its
	// first request within this long of being accepted or, when the
	// upstream requires SASL (upstream.sasl is set), has not completed its
	// authentication within it; 0 never does.
	ClientAuthenticate time.Duration `yaml:"client_authenticate"`
}

// Metrics is the Prometheus / health endpoint.
type Metrics struct {
	// Address of /metrics, /healthz and /readyz; empty disables them.
	Address string `yaml:"address"`
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ at
	// the same address. Off by default: a profile shows what the proxy
	// holds (record contents, ids) to whoever can reach the address.
	Pprof bool `yaml:"pprof"`
}

// Log configures log/slog.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text, json
}

// Embedded is the in-process cluster started when no upstream is
// configured.
type Embedded struct {
	// DataDir keeps the embedded cluster's topics across restarts. Empty:
	// $XDG_STATE_HOME/sharetx/embedded (or ~/.local/state/...).
	DataDir string `yaml:"data_dir"`
	Brokers int    `yaml:"brokers"`
}

// Default is the configuration with nothing set: a proxy on 127.0.0.1:9092
// in front of an embedded cluster.
func Default() Config {
	return Config{
		Listen: Listen{
			Bootstrap:      "127.0.0.1:9092",
			BrokerPortBase: 9093,
		},
		Upstream: Upstream{
			DialTimeout:     10 * time.Second,
			MetadataRefresh: 30 * time.Second,
		},
		Limits: Limits{
			MaxFrameBytes:              100 << 20,
			MaxInFlight:                128,
			MaxConnections:             10000,
			MaxConnectionsPerSource:    1000,
			MaxConnectionsPerPrincipal: 1000,
			MaxBufferedResponseBytes:   64 << 20,
			MaxDecodedRequestBytes:     1 << 20,
			MaxProcs:                   1,
		},
		Timeouts: Timeouts{
			ShutdownGrace:      10 * time.Second,
			ClientIdle:         10 * time.Minute,
			ClientAuthenticate: 10 * time.Second,
		},
		Metrics:  Metrics{Address: "127.0.0.1:9644"},
		Log:      Log{Level: "info", Format: "text"},
		Embedded: Embedded{Brokers: 1},
		KIP1289: KIP1289{
			APIKey:                95,
			ShadowTopic:           "__sharetx_shadow",
			ShadowPartitions:      8,
			ShadowReplication:     -1,
			MaxPendingRecords:     1_000_000,
			ClientAcks:            "absorb",
			CloseHold:             time.Minute,
			AckRideWait:           5 * time.Millisecond,
			ConcurrentTxnRetry:    15 * time.Millisecond,
			RecoveryLookback:      time.Hour,
			LearnOwnerFromProduce: true,
			NotReadyRetryFor:      15 * time.Second,
			OAuthBearerSubClaim:   "sub",

			MaxOffsetsPerCall:    100000,
			MaxPartitionsPerCall: 1000,
		},
	}
}

// Error is a configuration problem: the key it concerns and what to do.
type Error struct {
	Key string // dotted YAML path, e.g. "listen.bootstrap"
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("config key %s: %s", e.Key, e.Msg) }

func errorf(key, format string, args ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Load reads the YAML file at path (none if path is empty) over the
// defaults, then applies the environment (SHARETX_*), then validates.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("reading config file: %w", err)
		}
		if err := Parse(raw, &cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := ApplyEnv(&cfg, environ); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// Parse decodes YAML into cfg, refusing keys the schema does not have.
func Parse(raw []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is the defaults
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s (valid keys: %s)", strings.Join(te.Errors, "; "), strings.Join(Keys(), ", "))
		}
		return err
	}
	return nil
}

// field is one leaf of the schema.
type field struct {
	key string // dotted yaml path
	env string
	v   reflect.Value
}

func leaves(v reflect.Value, prefix string, out *[]field) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			leaves(fv, key, out)
			continue
		}
		*out = append(*out, field{
			key: key,
			env: "SHARETX_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")),
			v:   fv,
		})
	}
}

// Keys lists every configuration key, dotted.
func Keys() []string {
	var fs []field
	cfg := Default()
	leaves(reflect.ValueOf(&cfg).Elem(), "", &fs)
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}

// EnvNames maps every configuration key to its environment variable.
func EnvNames() map[string]string {
	var fs []field
	cfg := Default()
	leaves(reflect.ValueOf(&cfg).Elem(), "", &fs)
	m := make(map[string]string, len(fs))
	for _, f := range fs {
		m[f.key] = f.env
	}
	return m
}

// ApplyEnv sets every key that has a SHARETX_* variable in environ. An
// unknown SHARETX_ variable is an error: it is almost always a typo that
// would otherwise be silently ignored.
func ApplyEnv(cfg *Config, environ []string) error {
	var fs []field
	leaves(reflect.ValueOf(cfg).Elem(), "", &fs)
	byEnv := make(map[string]field, len(fs))
	for _, f := range fs {
		byEnv[f.env] = f
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "SHARETX_") {
			continue
		}
		f, ok := byEnv[name]
		if !ok {
			var names []string
			for n := range byEnv {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("environment variable %s is not a sharetx setting; valid names: %s", name, strings.Join(names, ", "))
		}
		if err := setFromString(f.v, val); err != nil {
			return errorf(f.key, "environment variable %s=%q: %v", name, val, err)
		}
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

func setFromString(v reflect.Value, s string) error {
	s = strings.TrimSpace(s)
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration (write e.g. 10s, 500ms)")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean (write true or false)")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		v.Set(reflect.ValueOf(out))
	case v.Kind() == reflect.Map:
		m := map[int32]int{}
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			ki, err1 := strconv.ParseInt(strings.TrimSpace(k), 10, 32)
			vi, err2 := strconv.Atoi(strings.TrimSpace(val))
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("write node-id=port pairs separated by commas, e.g. 1=9094,2=9095")
			}
			m[int32(ki)] = vi
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// Validate checks every value and returns the first problem, naming its key.
func (c *Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen.Bootstrap)
	if err != nil {
		return errorf("listen.bootstrap", "%q is not host:port (e.g. 127.0.0.1:9092)", c.Listen.Bootstrap)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return errorf("listen.bootstrap", "port %q is not a number from 0 to 65535", port)
	}
	if c.Listen.AdvertisedHost == "" && isWildcard(host) {
		return errorf("listen.advertised_host", "must be set when listen.bootstrap binds a wildcard address (%q): clients need a host they can reach, e.g. localhost or the pod IP", host)
	}
	if c.Listen.BrokerPortBase < 0 || c.Listen.BrokerPortBase > 65535 {
		return errorf("listen.broker_port_base", "%d is not a port (0 picks free ports)", c.Listen.BrokerPortBase)
	}
	for id, p := range c.Listen.BrokerPorts {
		if p <= 0 || p > 65535 {
			return errorf("listen.broker_ports", "node %d: %d is not a port from 1 to 65535", id, p)
		}
	}
	if t := c.Listen.TLS; t.Enabled {
		if t.CertFile == "" || t.KeyFile == "" {
			return errorf("listen.tls", "enabled needs cert_file and key_file")
		}
		for k, f := range map[string]string{"listen.tls.cert_file": t.CertFile, "listen.tls.key_file": t.KeyFile, "listen.tls.client_ca_file": t.ClientCAFile} {
			if f != "" {
				if _, err := os.Stat(f); err != nil {
					return errorf(k, "cannot read %q: %v", f, err)
				}
			}
		}
	}
	for i, s := range c.Upstream.BootstrapServers {
		if _, p, err := net.SplitHostPort(s); err != nil || p == "" {
			return errorf("upstream.bootstrap_servers", "entry %d %q is not host:port", i, s)
		}
	}
	if t := c.Upstream.TLS; t.Enabled {
		if (t.CertFile == "") != (t.KeyFile == "") {
			return errorf("upstream.tls", "cert_file and key_file go together: set both for a client certificate, or neither")
		}
		for k, f := range map[string]string{"upstream.tls.ca_file": t.CAFile, "upstream.tls.cert_file": t.CertFile, "upstream.tls.key_file": t.KeyFile} {
			if f != "" {
				if _, err := os.Stat(f); err != nil {
					return errorf(k, "cannot read %q: %v", f, err)
				}
			}
		}
	}
	switch c.Upstream.SASL.Mechanism {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.Upstream.SASL.Username == "" {
			return errorf("upstream.sasl.username", "must be set with mechanism %s", c.Upstream.SASL.Mechanism)
		}
	default:
		return errorf("upstream.sasl.mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (empty: no SASL)", c.Upstream.SASL.Mechanism)
	}
	if c.Upstream.DialTimeout <= 0 {
		return errorf("upstream.dial_timeout", "must be positive, e.g. 10s")
	}
	if c.Upstream.MetadataRefresh < time.Second {
		return errorf("upstream.metadata_refresh", "must be at least 1s, e.g. 30s")
	}
	if c.Limits.MaxFrameBytes < 1024 || c.Limits.MaxFrameBytes > 1<<30 {
		return errorf("limits.max_frame_bytes", "%d is outside 1024..1073741824 (Kafka's default is 104857600)", c.Limits.MaxFrameBytes)
	}
	if c.Limits.MaxInFlight < 1 || c.Limits.MaxInFlight > 10000 {
		return errorf("limits.max_in_flight", "%d is outside 1..10000", c.Limits.MaxInFlight)
	}
	if c.Limits.MaxProcs < 0 || c.Limits.MaxProcs > 1024 {
		return errorf("limits.max_procs", "%d is outside 0..1024 (0: Go's choice, every CPU or the container's limit)", c.Limits.MaxProcs)
	}
	if c.Limits.MaxConnections < 1 || c.Limits.MaxConnections > 1_000_000 {
		return errorf("limits.max_connections", "%d is outside 1..1000000", c.Limits.MaxConnections)
	}
	if c.Limits.MaxConnectionsPerSource < 1 || c.Limits.MaxConnectionsPerSource > 1_000_000 {
		return errorf("limits.max_connections_per_source", "%d is outside 1..1000000 (default 1000; above limits.max_connections it changes nothing)", c.Limits.MaxConnectionsPerSource)
	}
	if c.Limits.MaxConnectionsPerPrincipal < 1 || c.Limits.MaxConnectionsPerPrincipal > 1_000_000 {
		return errorf("limits.max_connections_per_principal", "%d is outside 1..1000000 (default 1000; above limits.max_connections it changes nothing)", c.Limits.MaxConnectionsPerPrincipal)
	}
	if c.Limits.MaxBufferedResponseBytes < 1024 || c.Limits.MaxBufferedResponseBytes > 1<<40 {
		return errorf("limits.max_buffered_response_bytes", "%d is outside 1024..1099511627776 (default 67108864)", c.Limits.MaxBufferedResponseBytes)
	}
	if c.Limits.MaxDecodedRequestBytes < 1024 || c.Limits.MaxDecodedRequestBytes > c.Limits.MaxFrameBytes {
		return errorf("limits.max_decoded_request_bytes", "%d is outside 1024..limits.max_frame_bytes (%d; default 1048576)", c.Limits.MaxDecodedRequestBytes, c.Limits.MaxFrameBytes)
	}
	if c.Timeouts.ShutdownGrace < 0 {
		return errorf("timeouts.shutdown_grace", "must not be negative")
	}
	if c.Timeouts.ClientIdle < 0 {
		return errorf("timeouts.client_idle", "must not be negative (0 disables)")
	}
	if c.Timeouts.ClientAuthenticate < 0 {
		return errorf("timeouts.client_authenticate", "must not be negative (0 disables)")
	}
	if c.Metrics.Pprof && c.Metrics.Address == "" {
		return errorf("metrics.pprof", "needs metrics.address: the profiles are served there")
	}
	if c.Metrics.Address != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Address); err != nil {
			return errorf("metrics.address", "%q is not host:port (empty disables metrics)", c.Metrics.Address)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return errorf("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return errorf("log.format", "%q is not one of text, json", c.Log.Format)
	}
	if k := c.KIP1289.APIKey; k < 0 || k > 32767 {
		return errorf("kip1289.api_key", "%d is not an API key (0..32767; default 95)", k)
	} else if k <= 94 {
		return errorf("kip1289.api_key", "%d is a key Kafka already uses (Kafka 4.4 uses up to 94); use 95 or higher", k)
	}
	if c.KIP1289.ShadowTopic == "" {
		return errorf("kip1289.shadow_topic", "must be set (default __sharetx_shadow)")
	}
	if c.KIP1289.ShadowPartitions < 2 {
		return errorf("kip1289.shadow_partitions", "%d: at least 2 are needed (a client writes its filler record to another partition than the proxy)", c.KIP1289.ShadowPartitions)
	}
	if r := c.KIP1289.ShadowReplication; r == 0 || r < -1 {
		return errorf("kip1289.shadow_replication", "%d: use -1 (broker default) or a positive factor", r)
	}
	if c.KIP1289.MaxPendingRecords < 1 {
		return errorf("kip1289.max_pending_records", "must be positive")
	}
	if c.KIP1289.CloseHold < 0 {
		return errorf("kip1289.close_hold", "must not be negative (0: do not hold)")
	}
	if w := c.KIP1289.ConcurrentTxnRetry; w < 0 || w > time.Second {
		return errorf("kip1289.concurrent_transactions_retry", "%v is outside 0..1s (0: CONCURRENT_TRANSACTIONS is passed on to the client at once)", w)
	}
	if w := c.KIP1289.WholeBatchWait; w < 0 || w > 5*time.Second {
		return errorf("kip1289.whole_batch_wait", "%v is outside 0..5s (0: committed acknowledgements never wait for the rest of their batch)", w)
	}
	if w := c.KIP1289.AckRideWait; w < 0 || w > time.Second {
		return errorf("kip1289.ack_ride_wait", "%v is outside 0..1s (0: the proxy's acknowledgements never wait for the member's next fetch)", w)
	}
	if c.KIP1289.MaxOffsetsPerCall < 1 || c.KIP1289.MaxOffsetsPerCall > 1<<24 {
		return errorf("kip1289.max_offsets_per_call", "%d is outside 1..16777216", c.KIP1289.MaxOffsetsPerCall)
	}
	if c.KIP1289.MaxPartitionsPerCall < 1 || c.KIP1289.MaxPartitionsPerCall > 100000 {
		return errorf("kip1289.max_partitions_per_call", "%d is outside 1..100000", c.KIP1289.MaxPartitionsPerCall)
	}
	if c.KIP1289.OAuthBearerSubClaim == "" {
		return errorf("kip1289.oauthbearer_sub_claim", "empty: name the token claim that holds the principal (the cluster's sasl.oauthbearer.sub.claim.name, sub by default)")
	}
	if p := c.KIP1289.GSSAPIPrincipal; p != "" {
		if typ, name, ok := strings.Cut(p, ":"); !ok || typ == "" || name == "" {
			return errorf("kip1289.gssapi_principal", "%q is not a principal Type:name (User:app)", p)
		}
	}
	if f := c.KIP1289.ShadowKeyFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return errorf("kip1289.shadow_key_file", "cannot read it: %v", err)
		}
		if len(bytes.TrimSpace(b)) < 32 {
			return errorf("kip1289.shadow_key_file", "%s holds %d bytes; the shared secret needs at least 32 (e.g. `head -c 48 /dev/urandom | base64 > %s`)", f, len(bytes.TrimSpace(b)), f)
		}
	}
	if c.KIP1289.NotReadyRetryFor <= 0 {
		return errorf("kip1289.not_ready_retry_for", "must be positive (e.g. 15s): how long a client may retry while the shadow topic is not ready")
	}
	if c.KIP1289.RecoveryLookback <= 0 {
		return errorf("kip1289.recovery_lookback", "must be positive (e.g. 1h): a proxy needs the shadow topic's recent records to screen redelivered records")
	}
	if c.KIP1289.ClientAcks != "absorb" && c.KIP1289.ClientAcks != "reject" {
		return errorf("kip1289.client_acks", "%q is not absorb or reject", c.KIP1289.ClientAcks)
	}
	if c.Embedded.Brokers < 1 || c.Embedded.Brokers > 9 {
		return errorf("embedded.brokers", "%d is outside 1..9", c.Embedded.Brokers)
	}
	return nil
}

func isWildcard(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::" || host == "[::]"
}

// AdvertisedHost is the host written into broker-naming responses.
func (c *Config) AdvertisedHost() string {
	if c.Listen.AdvertisedHost != "" {
		return c.Listen.AdvertisedHost
	}
	host, _, _ := net.SplitHostPort(c.Listen.Bootstrap)
	return host
}

// BrokerPort is the port upstream node id is served on; 0 means "any free
// port".
func (c *Config) BrokerPort(node int32) int {
	if p, ok := c.Listen.BrokerPorts[node]; ok {
		return p
	}
	if c.Listen.BrokerPortBase == 0 {
		return 0
	}
	return c.Listen.BrokerPortBase + int(node)
}
