package sim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The repository's Java applications (the examples, the demo's and the chaos
// tool's workers): java/apps.sh compiles them with the Java library and
// prints their classpath.

// JavaWorkerOpts are the JVM options of a worker process: several start at
// once (and again after each kill -9) on a small machine, so start fast with
// a small heap.
var JavaWorkerOpts = []string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"}

// JavaBinary is $JAVA_HOME/bin/java if JAVA_HOME is set (as
// e2e/kafka/kafka.sh), else java from PATH.
func JavaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("JAVA_HOME is %s but %s: %w", home, p, err)
		}
		return p, nil
	}
	return exec.LookPath("java")
}

// JavaMissing says what of java, javac and mvn (what java/apps.sh needs)
// cannot be found; empty when nothing is missing.
func JavaMissing() string {
	var missing []string
	if _, err := JavaBinary(); err != nil {
		missing = append(missing, "java")
	}
	for _, tool := range []string{"javac", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	return strings.Join(missing, ", ")
}

// NeedJava skips t (a *testing.T: this package does not import testing, so
// that the programs linking it get no test flags) when java, javac or mvn is
// missing, or fails it instead when E2E_REQUIRE_KAFKA is set (make test:
// every part must run).
func NeedJava(t interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}) {
	t.Helper()
	if m := JavaMissing(); m != "" {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatalf("%s not found: the Java applications need Java 17 and Maven (E2E_REQUIRE_KAFKA is set)", m)
		}
		t.Skipf("%s not found: the Java applications need Java 17 and Maven", m)
	}
}

// JavaApps runs java/apps.sh, its progress to progress (nil: kept for the
// error), and returns the java binary and the classpath of the applications.
func JavaApps(ctx context.Context, progress io.Writer) (java, classpath string, err error) {
	if m := JavaMissing(); m != "" {
		return "", "", fmt.Errorf("the Java applications need java, javac and mvn: %s not found", m)
	}
	if java, err = JavaBinary(); err != nil {
		return "", "", err
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", "", fmt.Errorf("finding java/apps.sh: %w", err)
	}
	if classpath, err = runSetup(ctx, root, "java/apps.sh", "classpath", progress); err != nil {
		return "", "", err
	}
	return java, classpath, nil
}

// runSetup runs the setup script at path (under root) from root, its
// progress (stderr) to progress (nil: kept for the error), and returns the
// last line it printed on stdout, which names what (an interpreter, a
// classpath).
func runSetup(ctx context.Context, root, path, what string, progress io.Writer) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, filepath.FromSlash(path)))
	cmd.Dir = root
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if progress != nil {
		cmd.Stderr = io.MultiWriter(&errOut, progress)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", path, err, LastLines(errOut.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "", fmt.Errorf("%s printed no %s", path, what)
	}
	return last, nil
}

func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KafkaLibsDir is where e2e/kafka/kafka.sh keeps the resolved Kafka jars of
// version (empty: KAFKA_VERSION, else 4.4.0), as that script computes it:
// KAFKA_LIBS, else $SHARETX_CACHE (default ~/.cache/sharetx)/kafka-libs-VERSION.
// It returns the version too. The directory holds .complete once resolved.
func KafkaLibsDir(version string) (dir, v string) {
	if version == "" {
		version = os.Getenv("KAFKA_VERSION")
	}
	if version == "" {
		version = "4.4.0"
	}
	if libs := os.Getenv("KAFKA_LIBS"); libs != "" {
		return libs, version
	}
	cache := os.Getenv("SHARETX_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "sharetx")
	}
	return filepath.Join(cache, "kafka-libs-"+version), version
}

// RealSeeds returns the real cluster of E2E_KAFKA_SEEDS, split, skipping t
// when it is not set (failing it instead with E2E_REQUIRE_KAFKA set) or
// under -short.
func RealSeeds(t interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}, short bool) []string {
	t.Helper()
	if os.Getenv("E2E_HALVES") == "kfake" {
		t.Skip("E2E_HALVES=kfake: the real-broker halves run in make test's Kafka passes")
	}
	seeds := os.Getenv("E2E_KAFKA_SEEDS")
	if seeds == "" {
		if os.Getenv("E2E_REQUIRE_KAFKA") != "" {
			t.Fatal("E2E_REQUIRE_KAFKA is set but E2E_KAFKA_SEEDS is not: start a cluster with `make kafka-up`")
		}
		t.Skip("real cluster not configured: set E2E_KAFKA_SEEDS (make test does)")
	}
	if short {
		t.Skip("-short")
	}
	return strings.Split(seeds, ",")
}
