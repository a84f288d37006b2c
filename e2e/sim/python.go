package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
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
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "python", "venv.sh"))
	cmd.Dir = root
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if progress != nil {
		cmd.Stderr = io.MultiWriter(&errOut, progress)
	}
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("python/venv.sh: %v\n%s", err, LastLines(errOut.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	python = strings.TrimSpace(lines[len(lines)-1])
	if python == "" {
		return "", "", errors.New("python/venv.sh printed no interpreter")
	}
	return python, root, nil
}
