package main

// The Java worker (--worker-lang java): examples/demo/java/io/sharetx/demo/DemoWorker.java, the
// same flags and protocol as worker.go, on the stock kafka-clients and the Java library
// (java/), compiled by java/apps.sh.

import (
	"context"
	"fmt"

	"github.com/sharetx/sharetx/e2e/sim"
)

const (
	langGo   = "go"
	langJava = "java"
	// javaWorkerClass is the Java worker's main class.
	javaWorkerClass = "io.sharetx.demo.DemoWorker"
)

// javaWorker is how to start the Java worker: the java binary and the
// arguments before the worker's flags.
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

// workerCommand is the program and arguments of a worker process with cfg:
// this binary re-executed (`demo worker ...`), or the Java worker, started
// directly so that kill -9 hits the JVM.
func (d *demo) workerCommand(cfg workerConfig) (string, []string) {
	if d.java == nil {
		return d.self, cfg.args()
	}
	return d.java.java, append(append([]string{}, d.java.args...), cfg.args()[1:]...) // without sim.WorkerArg
}
