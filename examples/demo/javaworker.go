package main

// The Java worker (--worker-lang java): examples/demo/java/io/sharetx/demo/DemoWorker.java, the
// same flags and protocol as worker.go, on the stock kafka-clients and the Java library
// (java/), compiled by java/apps.sh.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sharetx/sharetx/e2e/sim"
)

const (
	langGo     = "go"
	langJava   = "java"
	langPython = "python"
	// pythonWorkerScript is the Python worker, run by python/venv.sh's interpreter.
	pythonWorkerScript = "examples/demo/python/demo_worker.py"
	// javaWorkerClass is the Java worker's main class.
	javaWorkerClass = "io.sharetx.demo.DemoWorker"
)

// javaWorker is how to start the Java (or Python) worker: the java binary
// (or python interpreter) and the arguments before the worker's flags.
type javaWorker struct {
	java string
	args []string
}

// buildJavaWorker runs java/apps.sh (it compiles the library and the
// repository's Java applications, the worker among them, and prints their
// classpath).
func buildJavaWorker(ctx context.Context) (*javaWorker, error) {
	java, cp, err := sim.JavaApps(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("--worker-lang java: %v (run the demo from the repository)", err)
	}
	return &javaWorker{java: java, args: append(append([]string{}, sim.JavaWorkerOpts...), "-cp", cp, javaWorkerClass)}, nil
}

// buildPythonWorker runs python/venv.sh (the virtual environment with the
// sharetx package from the tree and confluent-kafka) and returns how to start
// the Python worker: the interpreter, -u (every line reaches the demo as it
// is printed) and the script.
func buildPythonWorker(ctx context.Context) (*javaWorker, error) {
	python, root, err := sim.PythonApps(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("--worker-lang python: %v (run the demo from the repository)", err)
	}
	return &javaWorker{java: python, args: []string{"-u", filepath.Join(root, pythonWorkerScript)}}, nil
}

// workerCommand is the program and arguments of a worker process with cfg:
// this binary re-executed (`demo worker ...`), or the Java or Python worker,
// started directly so that kill -9 hits the JVM or the interpreter.
func (d *demo) workerCommand(cfg workerConfig) (string, []string) {
	if d.java == nil {
		return d.self, cfg.args()
	}
	return d.java.java, append(append([]string{}, d.java.args...), cfg.args()[1:]...) // without sim.WorkerArg
}
