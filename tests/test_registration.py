"""Registration: `import cudagym` registers CudaKernel-v0; the "cudagym:" form works in a fresh process."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym

import cudagym


def test_import_registers_the_env() -> None:
    assert cudagym.ENV_ID in gym.registry
    spec = gym.spec("CudaKernel-v0")
    assert spec.entry_point == "cudagym.envs.kernel_env:CudaKernelEnv"
    assert spec.nondeterministic
    cudagym.register_envs()  # idempotent


def test_module_prefixed_id_in_a_fresh_process() -> None:
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'cudagym' not in sys.modules\n"
        "env = gym.make('cudagym:CudaKernel-v0', backend='cpu', max_turns=3)\n"
        "obs, info = env.reset(seed=1)\n"
        "print(info['task_id'], env.unwrapped.max_turns)\n"
        "env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().endswith(" 3") and out.stdout.startswith("builtin/")
