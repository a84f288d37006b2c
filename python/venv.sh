#!/usr/bin/env bash
# python/venv.sh [extra pip packages, each also its module's name (pytest)...]
#
# Makes (or reuses) the virtual environment the project's Python programs run in, installs the
# sharetx package from this tree (./python, with confluent-kafka from PyPI the first time) and the
# given extra packages into it, and prints its python interpreter's path as the last line of stdout
# (progress goes to stderr). The chaos runs and the demo (--worker-lang python) and
# python/test-with-proxy.sh use it.
# Env: SHARETX_PY_VENV (default python/.venv, ignored by git)  PYTHON (python3: the interpreter that makes it)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SHARETX_PY_VENV:-$ROOT/python/.venv}
PY=${PYTHON:-python3}
# One installer at a time (make test runs two suites, and the chaos runs build their worker too).
exec 9>"${VENV%/}.lock"
flock 9
if [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] making $VENV with $($PY --version 2>&1)" >&2
  "$PY" -m venv "$VENV" >&2
fi
# The package is reinstalled only when its sources changed (a hash of them is kept in the venv), so
# that a program already running from the environment never sees it half replaced; the extra
# packages only when missing.
sum=$(cd "$ROOT/python" && find pyproject.toml sharetx -type f -name '*.py' -o -type f -name '*.toml' -o -type f -name py.typed | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.sharetx-src" 2>/dev/null)" != "$sum" ]; then
  # Built in a copy of python/ so that no build/ or egg-info is left in the tree.
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  cp -r "$ROOT/python/pyproject.toml" "$ROOT/python/README.md" "$ROOT/python/sharetx" "$src/"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$src" >&2
  echo "$sum" >"$VENV/.sharetx-src"
fi
for pkg in "$@"; do
  "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$pkg') is None)" 2>/dev/null ||
    "$VENV/bin/pip" install -q --disable-pip-version-check "$pkg" >&2
done
echo "$VENV/bin/python"
