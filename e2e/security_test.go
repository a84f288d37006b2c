package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sharetx/sharetx/configs"
)

// testPKI is a CA and a server certificate for 127.0.0.1, written to files.
type testPKI struct {
	dir                    string
	caFile, certFile, keyF string
	pool                   *x509.CertPool
	cert                   tls.Certificate
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sharetx test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	p := &testPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyF: filepath.Join(dir, "key.pem")}
	os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	os.WriteFile(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(p.keyF, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	p.cert, err = tls.LoadX509KeyPair(p.certFile, p.keyF)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTLSBothSides: clients speak TLS to the proxy, the proxy speaks TLS
// (with a client certificate) to a TLS-only cluster, verifying it against
// the configured CA; without the CA, verification (on by default) refuses
// the upstream.
func TestTLSBothSides(t *testing.T) {
	pki := newPKI(t)
	b := FakeBackend(t, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.cert}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert}))
	p := StartProxy(t, b.Seeds, func(c *configs.Config) {
		c.Listen.TLS = configs.ServerTLS{Enabled: true, CertFile: pki.certFile, KeyFile: pki.keyF}
		c.Upstream.TLS = configs.ClientTLS{Enabled: true, CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyF}
	})
	tlsCl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr), kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer tlsCl.Close()
	ctx := ctxT(t, 30*time.Second)
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, tlsCl)
	if err != nil {
		t.Fatalf("metadata over TLS through the proxy: %v", err)
	}
	if len(md.Brokers) != 1 || !p.ProxyAddrs()[net.JoinHostPort(md.Brokers[0].Host, itoa(md.Brokers[0].Port))] {
		t.Fatalf("brokers %+v are not proxy addresses", md.Brokers)
	}
	if _, err := kadm.NewClient(tlsCl).CreateTopic(ctx, 1, 1, nil, "tls-topic"); err != nil {
		t.Fatalf("create topic over TLS: %v", err)
	}
	if err := tlsCl.ProduceSync(ctx, &kgo.Record{Topic: "tls-topic", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce over TLS through the proxy: %v", err)
	}

	// Verification is on by default: no CA configured, the upstream's
	// certificate is not trusted and nothing gets through.
	bad := startProxyNoWait(t, b.Seeds, func(c *configs.Config) {
		c.Upstream.TLS = configs.ClientTLS{Enabled: true, CertFile: pki.certFile, KeyFile: pki.keyF}
	})
	c, err := net.Dial("tcp", bad.Addr)
	if err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	Wait(t, 10*time.Second, "a log line about the unverified upstream certificate", func() bool {
		return bad.Logs.Contains("certificate")
	})
}

// TestSASLPassesThrough: SASL handshakes and authentication frames of
// clients pass through untouched; the proxy's own client authenticates with
// upstream.sasl. A wrong password fails as it does against the broker.
func TestSASLPassesThrough(t *testing.T) {
	b := FakeBackend(t, 1, kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "s3cret"),
		kfake.Superuser("SCRAM-SHA-256", "scram", "pw256"))
	p := StartProxy(t, b.Seeds, func(c *configs.Config) {
		c.Upstream.SASL = configs.SASL{Mechanism: "PLAIN", Username: "admin", Password: "s3cret"}
	})
	ctx := ctxT(t, 30*time.Second)
	for name, mech := range map[string]kgo.Opt{
		"plain":         kgo.SASL(plain.Auth{User: "admin", Pass: "s3cret"}.AsMechanism()),
		"scram-sha-256": kgo.SASL(scram.Auth{User: "scram", Pass: "pw256"}.AsSha256Mechanism()),
	} {
		rec := &DialRecorder{}
		cl := p.NewClient(t, rec, mech)
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
			t.Fatalf("%s through the proxy: %v", name, err)
		}
		rec.AssertOnlyProxy(t, p)
	}
	wrong := p.NewClient(t, &DialRecorder{}, kgo.SASL(plain.Auth{User: "admin", Pass: "nope"}.AsMechanism()), kgo.RequestRetries(0))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, wrong); err == nil {
		t.Fatal("a wrong password authenticated through the proxy")
	}
}

func itoa(p int32) string { return big.NewInt(int64(p)).String() }
