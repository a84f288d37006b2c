package configs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := Load("sharetx.yaml", nil)
	if err != nil {
		t.Fatalf("the example configuration does not load: %v", err)
	}
	if len(cfg.Upstream.BootstrapServers) == 0 {
		t.Fatal("example names no upstream")
	}
}

// Every key of the schema appears in the example file, so the example
// documents everything.
func TestExampleDocumentsEveryKey(t *testing.T) {
	raw, err := os.ReadFile("sharetx.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(string(raw), leaf+":") {
			t.Errorf("key %s is not in configs/sharetx.yaml", k)
		}
	}
}

func TestDefaultsValidate(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEnvOverrides(t *testing.T) {
	cfg := Default()
	err := ApplyEnv(&cfg, []string{
		"SHARETX_UPSTREAM_BOOTSTRAP_SERVERS=a:1, b:2",
		"SHARETX_LISTEN_ADVERTISED_HOST=pod.local",
		"SHARETX_LISTEN_BROKER_PORTS=1=9101,2=9102",
		"SHARETX_UPSTREAM_TLS_ENABLED=true",
		"SHARETX_TIMEOUTS_SHUTDOWN_GRACE=3s",
		"SHARETX_LIMITS_MAX_IN_FLIGHT=7",
		"SHARETX_LIMITS_MAX_PROCS=3",
		"HOME=/x",
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Upstream.BootstrapServers, ",") != "a:1,b:2" || cfg.Listen.AdvertisedHost != "pod.local" ||
		cfg.Listen.BrokerPorts[2] != 9102 || !cfg.Upstream.TLS.Enabled || cfg.Timeouts.ShutdownGrace != 3*time.Second ||
		cfg.Limits.MaxInFlight != 7 || cfg.Limits.MaxProcs != 3 {
		t.Fatalf("env not applied: %+v", cfg)
	}
	if cfg.BrokerPort(1) != 9101 || cfg.BrokerPort(5) != 9098 {
		t.Fatalf("broker ports: %d %d", cfg.BrokerPort(1), cfg.BrokerPort(5))
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		yaml, env, key string
	}{
		{yaml: "listen:\n  bootstrap: nonsense\n", key: "listen.bootstrap"},
		{yaml: "listen:\n  bootstrap: 0.0.0.0:9092\n", key: "listen.advertised_host"},
		{yaml: "limits:\n  max_in_flight: 0\n", key: "limits.max_in_flight"},
		{yaml: "limits:\n  max_connections: 0\n", key: "limits.max_connections"},
		{yaml: "limits:\n  max_procs: -1\n", key: "limits.max_procs"},
		{env: "SHARETX_LIMITS_MAX_PROCS=5000", key: "limits.max_procs"},
		{env: "SHARETX_LIMITS_MAX_CONNECTIONS=-5", key: "limits.max_connections"},
		{env: "SHARETX_LIMITS_MAX_CONNECTIONS_PER_SOURCE=0", key: "limits.max_connections_per_source"},
		{yaml: "limits:\n  max_connections_per_principal: -1\n", key: "limits.max_connections_per_principal"},
		{env: "SHARETX_TIMEOUTS_CLIENT_AUTHENTICATE=-1s", key: "timeouts.client_authenticate"},
		{yaml: "limits:\n  max_buffered_response_bytes: 100\n", key: "limits.max_buffered_response_bytes"},
		{yaml: "limits:\n  max_decoded_request_bytes: 2000000\n  max_frame_bytes: 1000000\n", key: "limits.max_decoded_request_bytes"},
		{yaml: "upstream:\n  bootstrap_servers: [nohost]\n", key: "upstream.bootstrap_servers"},
		{yaml: "upstream:\n  dial_timeout: -1s\n", key: "upstream.dial_timeout"},
		{yaml: "log:\n  level: loud\n", key: "log.level"},
		{yaml: "metrics:\n  address: \"\"\n  pprof: true\n", key: "metrics.pprof"},
		{yaml: "kip1289:\n  gssapi_principal: app\n", key: "kip1289.gssapi_principal"},
		{env: "SHARETX_KIP1289_OAUTHBEARER_SUB_CLAIM=", key: "kip1289.oauthbearer_sub_claim"},
		{yaml: "upstream:\n  tls:\n    enabled: true\n    ca_file: /no/such/file\n", key: "upstream.tls.ca_file"},
		{env: "SHARETX_LIMITS_MAX_FRAME_BYTES=lots", key: "limits.max_frame_bytes"},
		{env: "SHARETX_UPSTREAM_DIAL_TIMEOUT=10", key: "upstream.dial_timeout"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte(tc.yaml), 0o644)
		var environ []string
		if tc.env != "" {
			environ = []string{tc.env}
		}
		_, err := Load(path, environ)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%q %q: error %v, want one naming %s", tc.yaml, tc.env, err, tc.key)
		}
	}
}

func TestUnknownKeysRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("listen:\n  bootstrapp: 127.0.0.1:9092\n"), 0o644)
	_, err := Load(path, nil)
	if err == nil || !strings.Contains(err.Error(), "bootstrapp") {
		t.Fatalf("unknown key accepted or not named: %v", err)
	}
	if _, err := Load("", []string{"SHARETX_LISTEN_BOOTSTRAPP=x"}); err == nil || !strings.Contains(err.Error(), "SHARETX_LISTEN_BOOTSTRAPP") {
		t.Fatalf("unknown env var accepted or not named: %v", err)
	}
}
