"""Shared fixtures: one compile/baseline cache for the whole run, a fast evaluation config, leak checks."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from chat_stub import ChatStub

from cudagym.evaluator import EvalConfig
from cudagym.gpu_lock import LOCK_DIR_ENV
from cudagym.harness.timing import TimingConfig
from cudagym.tasks.kernelbench import ENV_VAR as KERNELBENCH_ENV
from cudagym.tasks.kernelbench import find_kernelbench_root

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Read when this file is imported, before any test clears the variable.
_KERNELBENCH_FROM_ENV = os.environ.get(KERNELBENCH_ENV)

# One cache for the session (and for the subprocesses tests start): compiled objects, the precompiled
# header and measured baselines are shared by every test instead of being rebuilt. A cache the run made is removed
# when it ends (``pytest_sessionfinish``); one named by $CUDAGYM_TEST_CACHE_DIR is the caller's and stays.
# Under pytest-xdist (``-n 2``) the workers of one run share it through the run's id, and the controller removes it.
SHARED_PREFIX = "cudagym-test-cache-"


def _shared_cache(run: str) -> Path:
    """The cache the workers of the xdist run ``run`` share."""
    return Path(tempfile.gettempdir()) / f"{SHARED_PREFIX}{run}"


def _session_cache() -> tuple[Path, bool]:
    """The session's cache folder, and whether this process made it (and so removes it)."""
    if os.environ.get("CUDAGYM_TEST_CACHE_DIR"):
        return Path(os.environ["CUDAGYM_TEST_CACHE_DIR"]), False
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        shared = _shared_cache(run)
        shared.mkdir(exist_ok=True)
        return shared, False
    return Path(tempfile.mkdtemp(prefix=SHARED_PREFIX)), True


_CACHE, _OWNED = _session_cache()
os.environ["CUDAGYM_CACHE_DIR"] = str(_CACHE)


def pytest_configure(config: pytest.Config) -> None:
    """Gives an xdist run its id here, where the controller can remember it, so that it can remove the workers'
    shared cache at the end."""
    if (
        hasattr(config.option, "testrunuid")
        and config.option.testrunuid is None
        and "PYTEST_XDIST_WORKER" not in os.environ
    ):
        config.option.testrunuid = uuid.uuid4().hex


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Removes the caches this run made: its own, and (in the xdist controller) the one its workers shared."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    if _OWNED:
        shutil.rmtree(_CACHE, ignore_errors=True)
    run = getattr(session.config.option, "testrunuid", None)
    if run and not os.environ.get("CUDAGYM_TEST_CACHE_DIR"):
        shutil.rmtree(_shared_cache(run), ignore_errors=True)


FAST_TIMING = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return _CACHE


@pytest.fixture(autouse=True)
def private_device_locks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Device slots in a folder of the test's own (``$CUDAGYM_LOCK_DIR``, inherited by the processes it starts), so
    that tests running beside each other do not wait for each other's slots. GPU tests keep the machine's folder:
    every run on the GPU machine takes turns on the one device."""
    if request.node.get_closest_marker("gpu") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(LOCK_DIR_ENV, str(tmp_path_factory.mktemp("locks")))
        yield


@pytest.fixture(scope="session")
def fast_config() -> EvalConfig:
    """Three checks and short timing: enough to exercise every path on a 2-core CI machine."""
    return EvalConfig(num_checks=3, timing=FAST_TIMING, verify_timeout=60, profile_timeout=120)


@pytest.fixture(scope="session")
def kernelbench_dir() -> Path:
    """A KernelBench copy (read-only; never copied into the repo): ``$CUDAGYM_KERNELBENCH_DIR``, else
    ``../shared/kernelbench`` next to the repository."""
    candidates = [Path(_KERNELBENCH_FROM_ENV)] if _KERNELBENCH_FROM_ENV else []
    candidates.append(REPO_ROOT.parent / "shared" / "kernelbench")
    for candidate in candidates:
        if candidate.is_dir() and find_kernelbench_root(candidate) is not None:
            return candidate
    pytest.skip(
        f"no KernelBench copy: set ${KERNELBENCH_ENV} or provide {candidates[-1]} (a folder with level1/ and level2/)"
    )


@pytest.fixture
def chat_stub() -> Iterator[type[ChatStub]]:
    """``chat_stub(replies)`` starts a stub; every stub started through it is stopped after the test."""
    started: list[ChatStub] = []

    class Tracked(ChatStub):
        def __init__(self, replies: Sequence[dict[str, Any] | int], **kwargs: Any) -> None:
            super().__init__(replies, **kwargs)
            started.append(self)
            self.__enter__()

    yield Tracked
    for stub in started:
        stub.stop()
