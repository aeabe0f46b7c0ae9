"""The trusted reference process (cudagym/reference_process.py, harness/reference.py): its background compile."""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.evaluator import EvalConfig
from cudagym.harness.protocol import (
    AwaitCompile,
    Baseline,
    CompileDone,
    CompileReference,
    Drop,
    Held,
    HeldSets,
    Load,
    Memory,
    MemoryUse,
    Prepare,
)
from cudagym.reference_process import ReferenceProcess
from cudagym.tasks import load

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


def _reference(source: str, cache_dir: Path, *, preload_compiler: bool = False) -> ReferenceProcess:
    from cudagym.evaluator import EvalConfig

    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig(), preload_compiler=preload_compiler)
    ref.call(Load(source=source, device="cpu", dtype="float32", weight_seed=1, threads=backend.threads))
    return ref


def _prepare(ref: ReferenceProcess, key: str, folder: str) -> None:
    ref.call(Prepare(key=key, seed=secrets.randbits(62), kind="task"))


def test_a_background_compile_answers_at_once_serves_meanwhile_and_is_awaited_before_use(
    cache_dir: Path, fast_config: EvalConfig
) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            start = time.monotonic()
            ref.call(CompileReference(key="ahead", background=True))
            answered = time.monotonic() - start
            ref.call(Drop(key="ahead"))  # the compile keeps its own hold on the inputs
            _prepare(ref, "check", folder)  # served while the compiler runs
            ref.call(AwaitCompile())
            compiled = time.monotonic() - start
            timing = dataclasses.asdict(fast_config.timing)
            assert ref.call(Baseline(key="check", mode="compile", timing=timing)).median_ms > 0
        assert answered < compiled  # the answer came before the compile was done
    finally:
        ref.close()


def test_a_failed_background_compile_fails_the_command_that_awaits_it(cache_dir: Path) -> None:
    ref = _reference(FAILS_OFF_THE_MAIN_THREAD, cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            ref.call(CompileReference(key="ahead", background=True))
            with pytest.raises(RuntimeError, match=r"await_compile failed.*only the main thread"):
                ref.call(AwaitCompile())
            ref.call(AwaitCompile())  # the error is reported once; the process goes on serving
            _prepare(ref, "check", folder)
    finally:
        ref.close()


def test_no_baseline_is_timed_while_a_background_compile_runs(cache_dir: Path, fast_config: EvalConfig) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            ref.call(CompileReference(key="ahead", background=True))
            assert not ref.call(CompileDone()).done  # code generation takes seconds
            timing = dataclasses.asdict(fast_config.timing)
            assert ref.call(Baseline(key="ahead", mode="eager", timing=timing)).median_ms > 0
            done = ref.call(CompileDone())
            assert done.done  # the eager timing waited for the compile to end
            assert done.threads == 1  # compiled in the process, no pool of compile workers
            assert ref.call(Held()).keys == ["ahead"]
    finally:
        ref.close()


# the reference server run in a plain interpreter: what the preload imports, and when
PRELOAD_PROBE = """
import json, os, sys
from cudagym.harness.reference import ReferenceServer
watched = ("torch", "torch._dynamo", "torch._inductor.compile_fx")
before = [name in sys.modules for name in watched]
server = ReferenceServer(None)
server.preload(compiler=sys.argv[1] == "compiler", device="cpu")
server._await_preload()
print(json.dumps({"before": before, "after": [name in sys.modules for name in watched]}))
"""


@pytest.mark.parametrize("compiler", [True, False])
def test_the_preload_imports_torch_and_only_when_asked_the_compiler(compiler: bool) -> None:
    argument = "compiler" if compiler else "torch"
    done = subprocess.run([sys.executable, "-c", PRELOAD_PROBE, argument], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["before"] == [False, False, False]  # the harness itself imports none of them
    assert report["after"] == [True, compiler, compiler]


def test_a_preloading_reference_loads_serves_and_compiles_and_says_where_the_compile_went(cache_dir: Path) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir, preload_compiler=True)
    try:  # ``load`` ran while the compiler was being imported
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            ref.call(CompileReference(key="ahead", background=True))
            _prepare(ref, "check", folder)  # served while the background compile waits for the imports
            ref.call(AwaitCompile())
            seconds = ref.call(CompileDone()).seconds
            assert set(seconds) == {"imports", "build", "slot", "run"} and seconds["build"] > 0 and seconds["run"] > 0
            assert ref.call(Held()).keys == ["ahead", "check"]
    finally:
        ref.close()


def test_a_background_compile_builds_while_another_times_and_runs_the_model_only_in_the_shared_slot(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another environment's timing holds the device, the compile traces and builds the model (CPU work) and
    then waits for the shared slot before its first run: the timing waited for none of the build, and the run
    overlapped no timing."""
    from cudagym.gpu_lock import LOCK_ENV, timing_slot, warmup_slot_env
    from cudagym.harness.common import WARMUP_SLOT_ENV

    monkeypatch.setenv(LOCK_ENV, "on")  # slots lock on the cpu backend too
    backend = resolve_backend("cpu")
    slot = warmup_slot_env(backend, tmp_path)[WARMUP_SLOT_ENV]
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _prepare(ref, "ahead", folder)
            with timing_slot(backend, tmp_path):  # a timing of another environment holds the device
                ref.call(CompileReference(key="ahead", background=True, slot=slot))
                deadline = time.monotonic() + 240
                while (state := ref.call(CompileDone())).stage in ("imports", "build") and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert state.stage == "slot"  # the code is built; its first run awaits the device
                time.sleep(1.0)
                assert ref.call(CompileDone()).stage == "slot"
                _prepare(ref, "check", folder)  # served meanwhile
            ref.call(AwaitCompile())  # the timing is over: the model runs
            seconds = ref.call(CompileDone()).seconds
            assert seconds["slot"] >= 1.0 and seconds["run"] > 0
            assert seconds["build"] > seconds["run"], seconds  # the code generation came before the slot, not in it
    finally:
        ref.close()


def test_the_memory_command_answers_on_cpu_and_a_poll_does_not_wait_for_a_call_in_flight(cache_dir: Path) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        # no device memory on cpu: the machine pool then measures nothing (it admits by device memory on cuda only)
        assert ref.call(Memory()) == MemoryUse(reserved_bytes=0, peak_reserved_bytes=0)
        assert ref.poll(Memory()) == MemoryUse(reserved_bytes=0, peak_reserved_bytes=0)
        with ref._lock:  # a call in flight (a stage's): the poll answers None at once
            assert ref.poll(Memory()) is None
    finally:
        ref.close()


def test_a_request_out_of_protocol_is_answered_as_a_failure_and_the_process_serves_on(cache_dir: Path) -> None:
    ref = _reference(load("builtin").get("builtin/relu").source_for("cpu"), cache_dir)
    try:
        for raw in ({"command": "format_disk"}, {"command": "drop", "key": 3}, {"command": "drop"}):
            ref.child.send(raw)
            reply = ref.child.receive(time.monotonic() + 30)
            assert reply is not None and reply["ok"] is False and reply["error"]["type"] == "ProtocolError", reply
        with pytest.raises(RuntimeError, match="reference baseline failed: KeyError"):  # a request that raised
            ref.call(Baseline(key="never prepared", mode="eager", timing={}))
        assert ref.call(Held()) == HeldSets(keys=[])
    finally:
        ref.close()


SLOW_TO_LOAD = """
import time
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(600)

    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


def test_a_close_from_another_thread_ends_a_call_in_flight_at_once() -> None:
    """An evaluator's close stops a reference whose load a preparation ahead waits on: the waiting call fails within
    a second or so even where the channel never reports its end (here a second writer, as a process that inherited
    the pipe would be, holds it open), not at the end of the reference timeout."""
    import threading

    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig())
    proc = ref.child.proc
    assert isinstance(proc, subprocess.Popen)
    write_fd = next(int(a) for a in proc.args[proc.args.index("reference") + 1 :] if str(a).isdigit())
    held = open(f"/proc/{proc.pid}/fd/{write_fd}", "wb")  # held open across the close
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            ref.call(Load(source=SLOW_TO_LOAD, device="cpu", dtype="float32", weight_seed=1, threads=1), timeout=300)
            outcome.append(None)
        except BaseException as exc:  # the test reads what the call raised
            outcome.append(exc)

    caller = threading.Thread(target=load, daemon=True)
    caller.start()
    try:
        time.sleep(1.0)  # the load is in flight: the model's constructor sleeps
        closed = time.monotonic()
        ref.close()
        caller.join(timeout=30)
        assert not caller.is_alive()
        assert time.monotonic() - closed < 15  # the kill's own waits, not the call's 300 s
        assert outcome and isinstance(outcome[0], RuntimeError)
    finally:
        held.close()


KILLED_WHILE_LOADING = """
import os
import signal
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would: no word written


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


def test_a_reference_process_that_dies_silently_is_reported_with_how_it_ended() -> None:
    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig())
    try:
        load = Load(source=KILLED_WHILE_LOADING, device="cpu", dtype="float32", weight_seed=1, threads=1)
        with pytest.raises(RuntimeError, match=r"failed during load: it was killed by SIGKILL and wrote nothing$"):
            ref.call(load, timeout=60)
    finally:
        ref.close()
