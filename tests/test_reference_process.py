"""The trusted reference process (cudagym/reference_process.py, harness/reference.py): its background compile."""

from __future__ import annotations

import dataclasses
import secrets
import tempfile
import time
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.reference_process import ReferenceProcess
from cudagym.tasks import load
from tests.conftest import FAST_TIMING

# eager from the process's main thread works; any call from another thread (the background compile) fails
FAILS_OFF_THE_MAIN_THREAD = """
import threading
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("only the main thread may run this model")
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""


def _reference(source: str, cache_dir: Path) -> ReferenceProcess:
    from cudagym.eval_config import EvalConfig

    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig())
    ref.call("load", source=source, device="cpu", dtype="float32", weight_seed=1, threads=backend.threads)
    return ref


def _prepare(ref: ReferenceProcess, key: str, folder: str) -> None:
    ref.call("prepare", key=key, seed=secrets.randbits(62), kind="task", transport="file", path=f"{folder}/{key}.pt")


def test_a_background_compile_answers_at_once_serves_meanwhile_and_is_awaited_before_use(cache_dir: Path) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            start = time.monotonic()
            ref.call("compile_reference", key="ahead", background=True)
            answered = time.monotonic() - start
            ref.call("drop", key="ahead")  # the compile keeps its own hold on the inputs
            _prepare(ref, "check", folder)  # served while the compiler runs
            ref.call("await_compile")
            compiled = time.monotonic() - start
            timing = dataclasses.asdict(FAST_TIMING)
            assert ref.call("baseline", key="check", mode="compile", timing=timing)["median_ms"] > 0
        assert answered < compiled  # the answer came before the compile was done
    finally:
        ref.close()


def test_a_failed_background_compile_fails_the_command_that_awaits_it(cache_dir: Path) -> None:
    ref = _reference(FAILS_OFF_THE_MAIN_THREAD, cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            ref.call("compile_reference", key="ahead", background=True)
            with pytest.raises(RuntimeError, match=r"await_compile failed.*only the main thread"):
                ref.call("await_compile")
            ref.call("await_compile")  # the error is reported once; the process goes on serving
            _prepare(ref, "check", folder)
    finally:
        ref.close()


def test_no_baseline_is_timed_while_a_background_compile_runs(cache_dir: Path) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            ref.call("compile_reference", key="ahead", background=True)
            assert not ref.call("compile_done")["done"]  # code generation takes seconds
            timing = dataclasses.asdict(FAST_TIMING)
            assert ref.call("baseline", key="ahead", mode="eager", timing=timing)["median_ms"] > 0
            done = ref.call("compile_done")
            assert done["done"]  # the eager timing waited for the compile to end
            assert done["threads"] == 1  # compiled in the process, no pool of compile workers
            assert ref.call("held")["keys"] == ["ahead"]
    finally:
        ref.close()
