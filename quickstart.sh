#!/usr/bin/env bash
# The quick start's first command (README.md): installs cudagym with its test dependencies into the Python that runs
# it ($PYTHON, default python3: use a virtual environment where the system's Python refuses pip installs), then
# plays the default task with the scripted agent (`cudagym run`). Arguments go to `cudagym run`
# (--backend cpu|cuda, --task ID, --quiet). CI (.ci/run) runs it as the README says.
set -euo pipefail
cd "$(dirname "$0")"
python="${PYTHON:-python3}"
if ! "$python" -c "import torch" 2>/dev/null; then
  # an installed torch (a CUDA build, say) is kept; else the pinned one
  "$python" -m pip install -q torch==2.13.0
fi
"$python" -m pip install -q -e '.[test]'
exec "$python" -m cudagym.cli run "$@"
