package main

import (
	"context"
	"fmt"
	"os"

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

// workerLangs are the values of --worker-lang.
var workerLangs = []string{"go", "java"}

// buildJavaWorker runs java/apps.sh (its progress into logPath) and returns
// the java binary and the classpath that runs javaWorkerClass.
func buildJavaWorker(ctx context.Context, logPath string) (java, classpath string, err error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return "", "", err
	}
	defer lf.Close()
	if java, classpath, err = sim.JavaApps(ctx, lf); err != nil {
		return "", "", fmt.Errorf("%w (log %s)", err, logPath)
	}
	return java, classpath, nil
}

// workerCommand is how a worker with configuration cfg is started: this
// binary re-executed (`chaos worker ...`), or a JVM running the Java worker
// with the same flags.
func (r *runner) workerCommand(cfg workerConfig) (path string, args, env []string) {
	if cfg.lang == "java" {
		args = append(append([]string{}, sim.JavaWorkerOpts...), "-cp", r.javaClasspath, javaWorkerClass)
		return r.javaBin, append(args, cfg.flags()...), os.Environ()
	}
	return r.selfBin, cfg.args(), sim.WorkerEnv(roleEnv)
}
