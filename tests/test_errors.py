"""One exception root: every exception class cudagym defines derives from ``CudaGymError``; public paths raise it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import gymnasium as gym
import pytest

import cudagym
from cudagym.backends import resolve_backend
from cudagym.errors import BackendUnavailable, ConfigError, CudaGymError, HarnessError
from cudagym.reward_shaping import RewardNotFound, make_reward
from cudagym.tasks import TaskSetNotFound

PACKAGES = (
    "cudagym",
    "cudagym.tasks",
    "cudagym.reward_shaping",
    "cudagym.envs",
    "cudagym.wrappers",
    "cudagym.baselines",
)
# the harness runs in child processes without the package (its modules import their siblings by their bare names):
# its exceptions stay in those processes and come back as results
HARNESS = "cudagym.harness."
# still outside the root, in a file the slot mechanism's rework owns; it is a RuntimeError reported as a harness
# error, so its place is under HarnessError
OUTSIDE: set[str] = set()


def _module_names() -> list[str]:
    names = set(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names.update(info.name for info in pkgutil.walk_packages(path, f"{package}."))
    return sorted(n for n in names if not n.startswith(HARNESS) and not n.endswith(".__main__"))


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _module_names():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # an optional dependency (trl, ray, ...) is not installed here
            if (exc.name or "").split(".")[0] == "cudagym":
                raise
            continue
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def test_every_exception_class_of_the_package_derives_from_the_root() -> None:
    classes = _exception_classes()
    assert {"cudagym.errors.CudaGymError", "cudagym.workspace.WorkspaceError"} <= set(classes)
    outside = {name for name, cls in classes.items() if not issubclass(cls, CudaGymError)}
    assert outside == OUTSIDE


def test_the_library_errors_keep_the_builtin_bases_callers_catch() -> None:
    assert issubclass(ConfigError, ValueError) and issubclass(HarnessError, RuntimeError)
    assert issubclass(TaskSetNotFound, KeyError) and issubclass(RewardNotFound, KeyError)
    assert issubclass(BackendUnavailable, CudaGymError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: resolve_backend("tpu"),
        lambda: gym.make(cudagym.ENV_ID, max_turns=0),
        lambda: cudagym.tasks.load("no_such_set"),
        lambda: make_reward("no_such_reward"),
    ],
    ids=["backend", "env_option", "task_set", "reward"],
)
def test_public_paths_raise_the_root(call: object) -> None:
    with pytest.raises(CudaGymError):
        call()  # type: ignore[operator]


def test_a_bad_option_is_a_config_error_and_still_a_value_error() -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        gym.make(cudagym.ENV_ID, max_turns=0)
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("tpu")
