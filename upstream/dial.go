// Package upstream is the proxy's side facing the real cluster: dialing
// brokers (with TLS), and the proxy's own client that discovers brokers.
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sharetx/sharetx/configs"
)

// Dialer opens connections to upstream brokers.
type Dialer struct {
	Timeout time.Duration
	TLS     *tls.Config // nil: plaintext
}

// NewDialer builds a dialer from the upstream configuration.
func NewDialer(cfg configs.Upstream) (*Dialer, error) {
	d := &Dialer{Timeout: cfg.DialTimeout}
	if cfg.TLS.Enabled {
		tc, err := ClientTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		d.TLS = tc
	}
	return d, nil
}

// DialContext dials addr, completing the TLS handshake when configured.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: d.Timeout, KeepAlive: 30 * time.Second}
	if d.TLS == nil {
		return nd.DialContext(ctx, network, addr)
	}
	tc := d.TLS.Clone()
	if tc.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		tc.ServerName = host
	}
	td := &tls.Dialer{NetDialer: nd, Config: tc}
	return td.DialContext(ctx, network, addr)
}

// ClientTLS builds the TLS configuration towards the brokers. Verification is
// on unless insecure_skip_verify is set.
func ClientTLS(c configs.ClientTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, &configs.Error{Key: "upstream.tls.ca_file", Msg: err.Error()}
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, &configs.Error{Key: "upstream.tls.cert_file", Msg: fmt.Sprintf("loading the client certificate and key: %v", err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ServerTLS builds the TLS configuration of the proxy's listeners.
func ServerTLS(c configs.ServerTLS) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, &configs.Error{Key: "listen.tls.cert_file", Msg: fmt.Sprintf("loading the certificate and key: %v", err)}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if c.ClientCAFile != "" {
		pool, err := loadPool(c.ClientCAFile)
		if err != nil {
			return nil, &configs.Error{Key: "listen.tls.client_ca_file", Msg: err.Error()}
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
