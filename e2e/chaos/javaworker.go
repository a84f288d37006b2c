package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sharetx/sharetx/e2e/sim"
)

// The Java worker (--worker-lang java): e2e/chaos/java's
// io.sharetx.chaos.ChaosWorker, the same consume-transform-produce loop and
// the same lines as the Go worker, on the stock KafkaShareConsumer and
// sharetx-clients' SharetxProducer. java/apps.sh builds it (with the
// library) once per run and prints its classpath; each worker is then a JVM
// started straight from the orchestrator (no shell in between), so kill -9,
// SIGSTOP and SIGCONT hit the JVM itself.

const javaWorkerClass = "io.sharetx.chaos.ChaosWorker"

// javaWorkerOpts: several JVMs start at once (and again after each kill) on
// a small machine: start fast, small heap.
var javaWorkerOpts = []string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"}

// workerLangs are the values of --worker-lang.
var workerLangs = []string{"go", "java"}

// javaBinary is $JAVA_HOME/bin/java if JAVA_HOME is set (as
// e2e/kafka/kafka.sh), else java from PATH.
func javaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("JAVA_HOME is %s but %s: %w", home, p, err)
		}
		return p, nil
	}
	return exec.LookPath("java")
}

// javaMissing says what of java, javac and mvn (what java/apps.sh needs)
// cannot be found; empty when nothing is missing.
func javaMissing() string {
	var missing []string
	if _, err := javaBinary(); err != nil {
		missing = append(missing, "java")
	}
	for _, tool := range []string{"javac", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	return strings.Join(missing, ", ")
}

// buildJavaWorker runs java/apps.sh (its progress into logPath) and returns
// the java binary and the classpath that runs javaWorkerClass.
func buildJavaWorker(ctx context.Context, logPath string) (java, classpath string, err error) {
	if m := javaMissing(); m != "" {
		return "", "", fmt.Errorf("--worker-lang java needs java, javac and mvn: %s not found", m)
	}
	if java, err = javaBinary(); err != nil {
		return "", "", err
	}
	root, err := sim.ModuleRoot()
	if err != nil {
		return "", "", fmt.Errorf("finding java/apps.sh: %w", err)
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return "", "", err
	}
	defer lf.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "java", "apps.sh"))
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &out, lf
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return "", "", fmt.Errorf("java/apps.sh: %v (see %s)\n%s", err, logPath, tail(string(b), 20))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	classpath = strings.TrimSpace(lines[len(lines)-1])
	if classpath == "" {
		return "", "", errors.New("java/apps.sh printed no classpath")
	}
	return java, classpath, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// workerCommand is how a worker with configuration cfg is started: this
// binary re-executed (`chaos worker ...`), or a JVM running the Java worker
// with the same flags.
func (r *runner) workerCommand(cfg workerConfig) (path string, args, env []string) {
	if r.o.WorkerLang == "java" {
		args = append(append([]string{}, javaWorkerOpts...), "-cp", r.javaClasspath, javaWorkerClass)
		return r.javaBin, append(args, cfg.flags()...), os.Environ()
	}
	return r.selfBin, cfg.args(), sim.WorkerEnv(roleEnv)
}
