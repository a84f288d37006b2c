package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
)

// The repository's Python programs (the chaos tool's and the demo's
// workers in Python): python/venv.sh makes the virtual environment, installs
// the sharetx package from the tree (and confluent-kafka, the first time)
// and prints its interpreter.

// PythonApps runs python/venv.sh, its progress to progress (nil: kept for
// the error), and returns the virtual environment's python and the
// repository's root (the workers' scripts are under it).
func PythonApps(ctx context.Context, progress io.Writer) (python, root string, err error) {
	if _, err := exec.LookPath("python3"); err != nil {
		return "", "", errors.New("the Python workers need python3 (with venv): not found")
	}
	if root, err = ModuleRoot(); err != nil {
		return "", "", fmt.Errorf("finding python/venv.sh: %w", err)
	}
	if python, err = runSetup(ctx, root, "python/venv.sh", "interpreter", progress); err != nil {
		return "", "", err
	}
	return python, root, nil
}
