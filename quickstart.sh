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
# The plugs whose libraries cannot be in the test extra (README, "Plugs"), installed without their own dependencies
# and never moving the installed torch: OpenEnv 0.10 asks for fastmcp<4 (hence mcp<2) and gradio, which verifiers 0.4's
# mcp==2.0.0 pin excludes; its server and client run on fastmcp 4.1.1 (mcp 2.0) without gradio. verl 0.9 pins
# transformers<5.11 and pulls ray[default], wandb and peft; its tool and agent-loop modules need only ray, tensordict,
# transformers, hydra, codetiming, datasets. Their tests skip where these are missing.
pin="$(mktemp)"
"$python" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$pin"
"$python" -m pip install -q -c "$pin" 'fastmcp==4.1.1' fastapi uvicorn websockets httpx typer rich pyyaml requests \
  huggingface_hub 'ray>=2.41' 'tensordict>=0.8,<=0.10,!=0.9.0' transformers hydra-core codetiming datasets
"$python" -m pip install -q --no-deps 'openenv==0.10.0' 'verl==0.9.1'
rm -f "$pin"
exec "$python" -m cudagym.cli run "$@"
