"""CudaKernel-v0 as TRL's ``environment_factory``: an object whose public methods are the tools.

TRL's ``GRPOTrainer(environment_factory=...)`` (trl >= 1.16, ``pip install 'cudagym[trl]'``) builds such objects
and pools them, one per concurrent rollout. It turns every public method except ``reset`` and ``get_reward`` into a
function-calling tool (the schema from the type hints and the Google docstring), calls ``reset(**row)`` with the
dataset row's columns before a rollout (the returned text is appended to the row's last user message), runs the
model's tool calls as method calls, and adds ``get_reward()`` to the rewards once the rollout is over, logged under
the class name. So :class:`CudaKernelToolEnv` has exactly the eight tools, ``reset`` and ``get_reward`` as public
methods; its tools' docstrings say what the tool models of ``cudagym.tools`` say (a test keeps them equal).

A row picks its task with a ``task_id`` column (:func:`make_dataset` writes one per task), else a ``seed`` column,
else the environment's random generator. The environment (its workspace and processes) is released by ``with`` or
when the object is collected (TRL keeps its pool for the trainer's lifetime). Properties are not tools: ``account``
holds the episode's outcome (tier, speedups, each reward term) for logging beyond the reward.

```python
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from cudagym.integrations.trl import CudaKernelToolEnv, make_dataset

trainer = GRPOTrainer(
    model="Qwen/Qwen3-8B",
    train_dataset=Dataset.from_list(make_dataset("builtin")),
    environment_factory=lambda: CudaKernelToolEnv(backend="cuda", max_turns=50),
    args=GRPOConfig(max_completion_length=8192),
)
```
"""

from __future__ import annotations

import logging
from typing import Any

from cudagym.envs import CudaKernelEnv
from cudagym.integrations.episode import EpisodeAccount, ToolEpisode
from cudagym.tasks import load as load_tasks

logger = logging.getLogger(__name__)

PROMPT = "Make this PyTorch model faster with your own kernels, using the tools. Submit when you are done."
"""The user message of :func:`make_dataset`'s rows; TRL appends the task (``reset``'s text) to it."""


def make_dataset(task_set: str = "builtin", prompt: str = PROMPT, **task_options: Any) -> list[dict[str, Any]]:
    """One row per task of ``task_set``: a conversational ``prompt`` and the ``task_id`` that ``reset(**row)`` plays.

    ``task_options`` go to the task-set loader (``ids=``, ``level=``, ``path=``, ...: ``cudagym.tasks.load``).
    ``datasets.Dataset.from_list`` turns the rows into TRL's train dataset.
    """
    tasks = load_tasks(task_set, **task_options)
    return [{"prompt": [{"role": "user", "content": prompt}], "task_id": task.id} for task in tasks]


class CudaKernelToolEnv:
    """One CudaKernel-v0 episode at a time, with the tools as methods (see the module doc).

    Args:
        **env_kwargs: passed to ``CudaKernelEnv`` (``task_set``, ``backend``, ``max_turns``, ``reward``,
            ``eval_config``, ``service_socket``, task-set options...). The environment is created at the first
            ``reset`` and reused by the episodes after it.
    """

    def __init__(self, **env_kwargs: Any) -> None:
        self._episode = ToolEpisode(**env_kwargs)

    def reset(self, **row: Any) -> str:
        """Starts an episode on the row's ``task_id`` (else the task its ``seed`` picks); other columns are ignored.

        Returns the task: the instructions and the reference model.py, which TRL appends to the prompt.
        """
        seed = row.get("seed")
        return self._episode.reset(task_id=row.get("task_id") or None, seed=None if seed is None else int(seed))

    @property
    def account(self) -> EpisodeAccount | None:
        """The current episode's account (return, reward terms, the submit's outcome); None before ``reset``."""
        return self._episode.account

    @property
    def gym_env(self) -> CudaKernelEnv | None:
        """The ``CudaKernelEnv`` the tools step; None before the first ``reset``."""
        return self._episode.env

    def get_reward(self) -> float | None:
        """The episode's return: the sum of the environment's rewards (the milestone tier after a submit).

        None (TRL leaves the rollout out of the advantages) when the harness could not evaluate the submit; 0.0
        for an episode that made no tool call.
        """
        account = self._episode.account
        if account is None:
            raise RuntimeError("get_reward() before reset(): no episode to score")
        if account.harness_error is not None:
            logger.warning("%s: no reward, the harness failed: %s", account.task_id, account.harness_error)
            return None
        return account.episode_return

    # -- the tools (each is one turn of the environment; the return value is what the tool said) -------

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file in the workspace. Writable: kernels/*.cu, *.cuh, *.cpp, *.h and model_new.py.

        Args:
            path: Workspace-relative path, e.g. kernels/relu.cu or model_new.py
            content: The complete new file content
        """
        return self._episode.call("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old_string: str, new_string: str) -> str:
        """Replace one exact occurrence of old_string by new_string in a workspace file (as read_file shows it).

        Args:
            path: Workspace-relative path of a writable file
            old_string: Text to find; must occur exactly once in the file
            new_string: Replacement text
        """
        return self._episode.call("edit_file", {"path": path, "old_string": old_string, "new_string": new_string})

    def read_file(self, path: str, offset: int = 1, limit: int = 400) -> str:
        """Read a workspace file (any file, including the fixed ones), with line numbers; non-ASCII shown as \\uXXXX.

        Args:
            path: Workspace-relative path
            offset: First line to show (1-based)
            limit: Maximum number of lines to show
        """
        return self._episode.call("read_file", {"path": path, "offset": offset, "limit": limit})

    def list_files(self) -> str:
        """List the workspace's files with their sizes and whether they are writable."""
        return self._episode.call("list_files", {})

    def compile(self) -> str:
        """Build kernels/ and the bindings into the Python module cuda_extension; shows compiler diagnostics."""
        return self._episode.call("compile", {})

    def verify(self) -> str:
        """Check model_new.ModelNew against the reference Model on several fresh random inputs."""
        return self._episode.call("verify", {})

    def profile(self, ncu: bool = False) -> str:
        """Time ModelNew against eager PyTorch and torch.compile; shows the speedups and per-kernel times.

        Args:
            ncu: Add Nsight Compute figures for your kernels (cuda only)
        """
        return self._episode.call("profile", {"ncu": ncu})

    def submit(self) -> str:
        """Final evaluation: compile, verify and profile, then the episode ends with the milestone tier."""
        return self._episode.call("submit", {})

    # -- not tools: TRL skips names that start with an underscore ------------------------------------

    def __enter__(self) -> CudaKernelToolEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self._episode.close()

    def __del__(self) -> None:
        try:
            self._episode.close()
        except Exception:  # interpreter shutdown: the environment's own finaliser removes the workspace
            pass
