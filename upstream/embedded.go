package upstream

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the in-process cluster (franz-go's kfake) that sharetx starts
// when no upstream is configured, so a first run needs nothing else.
type Embedded struct {
	Cluster *kfake.Cluster
	DataDir string
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
	all := append([]kfake.Opt{
		kfake.NumBrokers(n),
		kfake.DataDir(dir),
		kfake.ListenFn(compatListen),
	}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded cluster in %s: %w", dir, err)
	}
	return &Embedded{Cluster: c, DataDir: dir}, nil
}

// Seeds are the embedded cluster's broker addresses.
func (e *Embedded) Seeds() []string { return e.Cluster.ListenAddrs() }

// Close stops the cluster, flushing its data.
func (e *Embedded) Close() { e.Cluster.Close() }
