package upstream

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the in-process cluster (franz-go's kfake) that sharetx starts
// when no upstream is configured, so a first run needs nothing else.
type Embedded struct {
	Cluster *kfake.Cluster
	DataDir string
	lock    *os.File // holds an exclusive flock on DataDir/.lock while running
}

// DefaultDataDir is where the embedded cluster keeps its data when
// embedded.data_dir is not set.
func DefaultDataDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "sharetx", "embedded")
}

// StartEmbedded starts an embedded cluster of n brokers on loopback with its
// data in dir (a restart with the same dir keeps topics and offsets). It
// answers Apache Kafka's Java clients as Kafka's brokers do where kfake
// alone would not (see compatListen).
func StartEmbedded(dir string, n int, opts ...kfake.Opt) (*Embedded, error) {
	if dir == "" {
		dir = DefaultDataDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded cluster data dir: %w", err)
	}
	// Two clusters on one data dir would each persist over the other's
	// state (topics, offsets, transactions) and lose records: the second
	// one is refused.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded cluster data dir: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded.data_dir %s is in use by another sharetx with an embedded cluster (%v): stop it, "+
			"or give this one its own directory (embedded.data_dir, SHARETX_EMBEDDED_DATA_DIR)", dir, err)
	}
	all := append([]kfake.Opt{
		kfake.NumBrokers(n),
		kfake.DataDir(dir),
		kfake.ListenFn(compatListen),
	}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("starting the embedded cluster in %s: %w", dir, err)
	}
	return &Embedded{Cluster: c, DataDir: dir, lock: lock}, nil
}

// Seeds are the embedded cluster's broker addresses.
func (e *Embedded) Seeds() []string { return e.Cluster.ListenAddrs() }

// Close stops the cluster, flushing its data, and frees its data dir.
func (e *Embedded) Close() {
	e.Cluster.Close()
	e.lock.Close()
}
