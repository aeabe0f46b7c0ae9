"""Shared fixtures: one compile/baseline cache for the whole run, a fast evaluation config, leak checks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig


# One cache for the session (and for the subprocesses tests start): compiled objects, the precompiled
# header and measured baselines are shared by every test instead of being rebuilt.
# Under pytest-xdist (``-n 2``) the workers of one run share it through the run's id.
def _session_cache() -> Path:
    if os.environ.get("CUDAGYM_TEST_CACHE_DIR"):
        return Path(os.environ["CUDAGYM_TEST_CACHE_DIR"])
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        shared = Path(tempfile.gettempdir()) / f"cudagym-test-cache-{run}"
        shared.mkdir(exist_ok=True)
        return shared
    return Path(tempfile.mkdtemp(prefix="cudagym-test-cache-"))


_CACHE = _session_cache()
os.environ["CUDAGYM_CACHE_DIR"] = str(_CACHE)

FAST_TIMING = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return _CACHE


@pytest.fixture(scope="session")
def fast_config() -> EvalConfig:
    """Three checks and short timing: enough to exercise every path on a 2-core CI machine."""
    return EvalConfig(num_checks=3, timing=FAST_TIMING, verify_timeout=60, profile_timeout=120)
