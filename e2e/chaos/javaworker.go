package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
var workerLangs = []string{"go", "java", "python"}

// The Python worker (--worker-lang python): e2e/chaos/python/chaos_worker.py,
// the same loop and lines on confluent-kafka's ShareConsumer and the sharetx
// package's Producer, run by the interpreter of python/venv.sh's virtual
// environment (made once per run), started straight from the orchestrator.
const pythonWorkerScript = "e2e/chaos/python/chaos_worker.py"

// buildPythonWorker runs python/venv.sh (its progress into logPath) and
// returns the interpreter and the worker script's path.
func buildPythonWorker(ctx context.Context, logPath string) (python, script string, err error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return "", "", err
	}
	defer lf.Close()
	python, root, err := sim.PythonApps(ctx, lf)
	if err != nil {
		return "", "", fmt.Errorf("%w (log %s)", err, logPath)
	}
	return python, filepath.Join(root, pythonWorkerScript), nil
}

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
	if cfg.lang == "python" {
		// -u: every protocol line reaches the orchestrator as it is printed.
		return r.pythonBin, append([]string{"-u", r.pythonWorker}, cfg.flags()...), os.Environ()
	}
	return r.selfBin, cfg.args(), sim.WorkerEnv(roleEnv)
}
