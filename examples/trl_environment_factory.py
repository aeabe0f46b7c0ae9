"""CudaKernel-v0 as a TRL ``environment_factory``: an object whose public methods are the tools.

TRL's ``GRPOTrainer(environment_factory=...)`` builds (and pools) such objects: it turns every public
method into a function-calling tool (schema from the type hints and the Google docstring), calls
``reset(**row)`` with the dataset row's columns at the start of a rollout (a returned string is appended to
the last user message), runs the model's tool calls as method calls, and adds ``get_reward()`` to the
rewards once the rollout is over. So this class has exactly the eight tools, ``reset`` and
``get_reward`` as public methods; the environment is released with ``with`` or when the object is
garbage-collected. The tools' docstrings repeat the tool models' descriptions (a test keeps them equal).

```python
from trl import GRPOConfig, GRPOTrainer
trainer = GRPOTrainer(
    model="Qwen/Qwen3-8B",
    train_dataset=Dataset.from_list(make_dataset()),
    reward_funcs=[],  # get_reward() is added by TRL
    environment_factory=lambda: CudaKernelToolEnv(backend="cuda", max_turns=50),
    args=GRPOConfig(...),
)
```

    python examples/trl_environment_factory.py --backend cpu   # plays one task with the scripted agent
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cudagym.baselines.scripted import ScriptedAgent
from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load as load_tasks
from cudagym.tools import parse_action

PROMPT = "Make this PyTorch model faster with your own kernels, using the tools. Submit when you are done."


def make_dataset(task_set: str = "builtin", prompt: str = PROMPT, **filters: Any) -> list[dict[str, Any]]:
    """One row per task: a conversational ``prompt`` and the ``task_id`` that ``reset(**row)`` plays."""
    return [{"prompt": [{"role": "user", "content": prompt}], "task_id": t.id} for t in load_tasks(task_set, **filters)]


class CudaKernelToolEnv:
    """One CudaKernel-v0 episode at a time, with the tools as methods (see the module doc).

    Args:
        **env_kwargs: passed to ``CudaKernelEnv`` (``task_set``, ``backend``, ``max_turns``, ``reward``,
            ``eval_config``, task filters...). The environment is created at the first ``reset``.
    """

    def __init__(self, **env_kwargs: Any) -> None:
        self._env_kwargs = env_kwargs
        self._env: CudaKernelEnv | None = None
        self._return = 0.0
        self._done = False

    def reset(self, **row: Any) -> str | None:
        """Starts an episode on the row's ``task_id`` (or the task its ``seed`` picks).

        Returns the task: the instructions and the reference model.py, appended to the prompt by TRL.
        """
        if self._env is None:
            self._env = CudaKernelEnv(**self._env_kwargs)
        options = {"task_id": row["task_id"]} if row.get("task_id") else None
        seed = row.get("seed")
        observation, _ = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._return = 0.0
        self._done = False
        return observation

    def get_reward(self) -> float:
        """The episode's return: the sum of the environment's rewards (the milestone tier after a submit)."""
        return self._return

    # -- the tools (each is one turn of the environment; the return value is what the tool said) -------

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file in the workspace. Writable: kernels/*.cu, *.cuh, *.cpp, *.h and model_new.py.

        Args:
            path: Workspace-relative path, e.g. kernels/relu.cu or model_new.py
            content: The complete new file content
        """
        return self._call("write_file", path=path, content=content)

    def edit_file(self, path: str, old_string: str, new_string: str) -> str:
        """Replace one exact occurrence of old_string by new_string in a workspace file (as read_file shows it).

        Args:
            path: Workspace-relative path of a writable file
            old_string: Text to find; must occur exactly once in the file
            new_string: Replacement text
        """
        return self._call("edit_file", path=path, old_string=old_string, new_string=new_string)

    def read_file(self, path: str, offset: int = 1, limit: int = 400) -> str:
        """Read a workspace file (any file, including the fixed ones), with line numbers; non-ASCII shown as \\uXXXX.

        Args:
            path: Workspace-relative path
            offset: First line to show (1-based)
            limit: Maximum number of lines to show
        """
        return self._call("read_file", path=path, offset=offset, limit=limit)

    def list_files(self) -> str:
        """List the workspace's files with their sizes and whether they are writable."""
        return self._call("list_files")

    def compile(self) -> str:
        """Build kernels/ and the bindings into the Python module cuda_extension; shows compiler diagnostics."""
        return self._call("compile")

    def verify(self) -> str:
        """Check model_new.ModelNew against the reference Model on several fresh random inputs."""
        return self._call("verify")

    def profile(self, ncu: bool = False) -> str:
        """Time ModelNew against eager PyTorch and torch.compile; shows the speedups and per-kernel times.

        Args:
            ncu: Add Nsight Compute figures for your kernels (cuda only)
        """
        return self._call("profile", ncu=ncu)

    def submit(self) -> str:
        """Final evaluation: compile, verify and profile, then the episode ends with the milestone tier."""
        return self._call("submit")

    # -- internals -----------------------------------------------------------------------------------

    def _call(self, name: str, **arguments: Any) -> str:
        if self._env is None or self._env.task is None:
            raise RuntimeError("call reset() before the tools")
        observation, reward, terminated, truncated, _ = self._env.step(
            json.dumps({"name": name, "arguments": arguments})
        )
        if not self._done:
            self._return += float(reward)
        self._done = self._done or terminated or truncated
        return observation

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def __enter__(self) -> CudaKernelToolEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Plays one task's reference solution through the tool methods.")
    parser.add_argument("--task", default="builtin/relu")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    row = next(r for r in make_dataset() if r["task_id"] == args.task)
    with CudaKernelToolEnv(backend=args.backend) as env:
        env.reset(**row)
        for action in ScriptedAgent(profile=False).actions(env._env.task, env._env.backend.name):
            call = parse_action(action)
            print(getattr(env, call.tool_name())(**call.model_dump()).splitlines()[0])
        print(f"{args.task}: reward {env.get_reward():g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
