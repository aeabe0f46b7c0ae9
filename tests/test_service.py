"""The local evaluation service and the device slots (CPU backend).

One server is shared by the module: two clients evaluate a right and a wrong solution at the same time,
two concurrent profiles take turns on the timing slot (read back from the slot journal), and an
environment made with ``gym.make`` evaluates through it. A server of its own is stopped and killed to
show that a lost service gives harness-error results, not exceptions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from cudagym_testing import RELU, relu_solution

import cudagym  # noqa: F401  (registers the environment)
from cudagym import service_messages as messages
from cudagym.backends import Backend, resolve_backend
from cudagym.baselines import tool_call
from cudagym.evaluator import EvalConfig
from cudagym.gpu_lock import (
    JOURNAL_ENV,
    LOCK_ENV,
    TimingSlotTimeout,
    device_identity,
    exclusive_overlap_s,
    read_journal,
    shared_slot,
    timing_slot,
)
from cudagym.results import (
    CheckResult,
    CompileResult,
    CudaFault,
    IntegrityFinding,
    KernelResources,
    KernelTime,
    ProfileResult,
    Stage,
    Status,
    SubmitResult,
    VerifyResult,
)
from cudagym.service import (
    ServiceEvaluator,
    ServiceEvaluatorFactory,
    UnixSocketTransport,
    decode_result,
    encode,
    spawn_server,
)
from cudagym.tasks import load
from cudagym.workspace import Workspace

CPU = resolve_backend("cpu")


@dataclasses.dataclass
class Service:
    socket: Path
    journal: Path
    proc: subprocess.Popen


def _start(folder: Path, cache_dir: Path) -> Service:
    journal = folder / "journal.jsonl"
    sock = folder / "eval.sock"
    proc = spawn_server(sock, "cpu", cache_dir=cache_dir, env={LOCK_ENV: "on", JOURNAL_ENV: str(journal)})
    return Service(sock, journal, proc)


@pytest.fixture(scope="module")
def service(cache_dir: Path) -> Iterator[Service]:
    folder = Path(tempfile.mkdtemp(prefix="cg-svc-", dir="/tmp"))  # AF_UNIX paths must stay short
    running = _start(folder, cache_dir)
    yield running
    running.proc.terminate()
    running.proc.wait(timeout=60)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def config(fast_config: EvalConfig) -> EvalConfig:
    """The fast config without the torch.compile baseline (its compile time is not what is tested here)."""
    return dataclasses.replace(fast_config, compile_baseline=False)


@pytest.fixture(scope="module")
def clients(service: Service, config: EvalConfig) -> Iterator[list[ServiceEvaluator]]:
    task = load("builtin").get(RELU)
    pair = [ServiceEvaluator(task, CPU, config, socket_path=service.socket) for _ in range(2)]
    yield pair
    for client in pair:
        client.close()


def relu_workspace(*, wrong: bool = False) -> Workspace:
    task = load("builtin").get(RELU)
    workspace = Workspace(task.source_for("cpu"), "instructions")
    for path, content in relu_solution().items():
        if wrong and path == "kernels/relu.cpp":
            content = content.replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v;")  # negatives pass through
            assert "y[i] = v;" in content
        workspace.write(path, content)
    return workspace


def concurrently(*calls: Callable[[], object]) -> list[tuple[object, float, float]]:
    """Runs the calls on threads released together; returns (result, start, end) for each."""
    barrier = threading.Barrier(len(calls))
    out: list[tuple[object, float, float] | None] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        start = time.monotonic()
        result = calls[i]()
        out[i] = (result, start, time.monotonic())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]


def overlap(a: tuple[object, float, float], b: tuple[object, float, float]) -> float:
    return min(a[2], b[2]) - max(a[1], b[1])


# -- the wire format -------------------------------------------------------------------------------


def test_results_come_back_as_the_same_frozen_dataclasses() -> None:
    check = CheckResult(0, False, 0.5, 0.25, (3, 1), 1.0, 0.5, 7, 100, problem="")
    profile = ProfileResult(
        Stage.PROFILE,
        Status.OK,
        "fast",
        1.5,
        candidate_ms=1.25,
        eager_ms=2.0,
        speedup_eager=1.6,
        kernels=(KernelTime("k", 3, 0.5, 1.0),),
    )
    submit = SubmitResult(
        Stage.SUBMIT,
        Status.OK,
        "Tier 2.",
        tier=2,
        compiled=True,
        correct=True,
        compile=CompileResult(Stage.COMPILE, Status.OK, kernels=(KernelResources("k", registers=32),)),
        verify=VerifyResult(
            Stage.VERIFY,
            Status.MISMATCH,
            checks=(check,),
            atol=0.01,
            fault=CudaFault("misaligned address", "misaligned address", kernels=("k", "j"), sanitizer="at k+0x10"),
        ),
        profile=profile,
        integrity=(IntegrityFinding("fixed_files_unchanged", True),),
    )
    for result in (submit, profile, submit.verify, submit.compile):
        wire = json.loads(json.dumps(encode(result)))
        back = decode_result(type(result).__name__, wire)
        assert back == result and type(back) is type(result)
    assert decode_result("SubmitResult", encode(submit)).verify.checks[0].worst_index == (3, 1)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown result type"):
        decode_result("Workspace", {})


def test_the_server_refuses_a_message_out_of_protocol_and_serves_on(service: Service) -> None:
    transport = UnixSocketTransport(service.socket)
    try:
        for raw in ({"op": "open"}, {"message": "Evaluate", "stage": "verify"}, [1, 2]):
            reply = transport.request(raw, timeout=30)  # type: ignore[arg-type]
            assert messages.decode_reply(messages.Hello(), reply) == messages.Refused(reply["error"])
            assert "out of protocol" in reply["error"]
        early = messages.Evaluate("verify", messages.WorkspaceSpec("/tmp", {}))
        assert messages.decode_reply(early, transport.request(messages.encode(early), timeout=30)) == (
            messages.Refused("Evaluate before Open")
        )
        info = messages.decode_reply(messages.Hello(), transport.request(messages.encode(messages.Hello()), 30))
        assert isinstance(info, messages.ServerInfo) and info.backend == "cpu" and info.pool is None
    finally:
        transport.close()


class _Scripted:
    """A transport whose server answers every request with one fixed JSON object (a server out of protocol)."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply, self.asked = reply, []

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.asked.append(message["message"])
        return self.reply

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    "reply",
    [
        messages.encode(messages.Acknowledged()),  # answers Evaluate as if it were Open
        {"ok": True, "type": "VerifyResult", "result": {}},  # the old envelope
        messages.encode(messages.Evaluated("ProfileResult", {})),  # another stage's result
    ],
)
def test_a_reply_out_of_protocol_is_a_harness_error_at_the_client(reply: dict[str, Any], config: EvalConfig) -> None:
    task = load("builtin").get(RELU)
    ok = messages.encode(messages.Acknowledged())
    transport = _Scripted(ok)
    client = ServiceEvaluator(task, CPU, config, transport=transport)
    workspace = relu_workspace()
    try:
        client._session()
        transport.reply = reply
        result = client.verify(workspace)
        assert isinstance(result, VerifyResult) and result.status is Status.HARNESS_ERROR, result
        assert transport.asked == ["Open", "Evaluate"]
    finally:
        workspace.remove()


# -- one server, several clients --------------------------------------------------------------------


def test_two_clients_evaluate_a_right_and_a_wrong_solution_in_parallel(clients: list[ServiceEvaluator]) -> None:
    right, wrong = relu_workspace(), relu_workspace(wrong=True)
    try:
        built = concurrently(lambda: clients[0].compile(right), lambda: clients[1].compile(wrong))
        assert all(isinstance(r, CompileResult) and r.ok for r, _, _ in built), built
        verified = concurrently(lambda: clients[0].verify(right), lambda: clients[1].verify(wrong))
    finally:
        right.remove()
        wrong.remove()
    good, bad = verified[0][0], verified[1][0]
    assert isinstance(good, VerifyResult) and good.status is Status.OK, good
    assert good.passed == len(good.checks) >= 3
    assert isinstance(bad, VerifyResult) and bad.status is Status.MISMATCH, bad
    assert not bad.checks[0].passed and bad.checks[0].expected == 0.0 and bad.checks[0].actual < 0
    assert overlap(*verified) > 0, "the two verifications ran one after the other"


def test_timing_slot_serialises_two_concurrent_profiles(service: Service, clients: list[ServiceEvaluator]) -> None:
    workspaces = [relu_workspace(), relu_workspace()]
    before = len(read_journal(service.journal))
    try:
        profiled = concurrently(*(lambda c=c, w=w: c.profile(w) for c, w in zip(clients, workspaces, strict=True)))
    finally:
        for w in workspaces:
            w.remove()
    for result, _, _ in profiled:
        assert isinstance(result, ProfileResult) and result.ok, result
    assert overlap(*profiled) > 0, "the two profile calls did not run at the same time"
    slots = [e for e in read_journal(service.journal)[before:] if e["mode"] == "exclusive"]
    assert len(slots) >= 2, f"LocalEvaluator.profile took {len(slots)} timing slot(s) for two profiles"
    assert exclusive_overlap_s(slots) == 0.0, slots


def test_env_made_with_gym_make_evaluates_through_the_service(service: Service, config: EvalConfig) -> None:
    env = gym.make(
        "CudaKernel-v0",
        backend="cpu",
        eval_config=config,
        max_turns=20,
        service_socket=str(service.socket),  # the shorthand for evaluator_factory=ServiceEvaluatorFactory(...)
    )
    try:
        env.reset(options={"task_id": RELU})
        for path, content in relu_solution().items():
            env.step(tool_call("write_file", path=path, content=content))
        _, reward, terminated, _, info = env.step(tool_call("submit"))
        assert isinstance(env.unwrapped.evaluator, ServiceEvaluator)
    finally:
        env.close()
    assert terminated and info["tier"] >= 1 and reward == info["tier"], info
    assert info["result"]["stage"] == "submit" and info["result"]["verify"]["status"] == "ok"
    # the factory behind service_socket travels to vector-env workers
    factory = pickle.loads(pickle.dumps(ServiceEvaluatorFactory(str(service.socket))))
    assert factory.socket_path == str(service.socket)


def wait_stopped(pid: int) -> None:
    """Returns once every thread of ``pid`` is stopped (a signal is delivered when a thread next runs)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = [(task / "stat").read_text() for task in Path(f"/proc/{pid}/task").iterdir()]
        if all(stat.rsplit(")", 1)[1].split()[0] in "tT" for stat in stats):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop")


def test_a_lost_service_gives_harness_errors_not_exceptions(cache_dir: Path, config: EvalConfig) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cg-svc-", dir="/tmp"))
    running = _start(folder, cache_dir)
    task = load("builtin").get(RELU)
    workspace = relu_workspace()
    client = ServiceEvaluator(task, CPU, config, socket_path=running.socket)
    try:
        first = client.compile(workspace)
        assert first.ok, first
        client.call_timeout = 1.0
        os.kill(running.proc.pid, signal.SIGSTOP)  # alive but silent: the call times out
        wait_stopped(running.proc.pid)
        hung = client.compile(workspace)
        assert isinstance(hung, CompileResult) and hung.status is Status.HARNESS_ERROR
        assert "no reply" in hung.message
        os.kill(running.proc.pid, signal.SIGKILL)
        running.proc.wait(timeout=30)
        for result in (client.verify(workspace), client.profile(workspace), client.submit(workspace)):
            assert result.status is Status.HARNESS_ERROR and "evaluation service" in result.message, result
        assert isinstance(result, SubmitResult) and result.tier == -1
        nowhere = ServiceEvaluator(task, CPU, config, socket_path=folder / "none.sock")
        assert nowhere.verify(workspace).status is Status.HARNESS_ERROR
        nowhere.close()
        client.close()
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()
        workspace.remove()
        shutil.rmtree(folder, ignore_errors=True)


# -- device slots -----------------------------------------------------------------------------------

_HOLD = """
import json, os, sys, time
from cudagym.backends import resolve_backend
from cudagym.gpu_lock import timing_slot
folder = sys.argv[1]
open(os.path.join(folder, f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(os.path.join(folder, "go")):  # both ask for the slot at once, however loaded the host
    time.sleep(0.001)
asked = time.time()
with timing_slot(resolve_backend("cpu"), folder, enabled=True) as slot:
    time.sleep(1.0)
print(json.dumps({"asked": asked, "waited": slot.waited_s, "start": slot.acquired_at, "end": slot.released_at}))
"""


def test_timing_slot_serialises_processes(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    first, second = sorted((json.loads(p.communicate(timeout=60)[0]) for p in procs), key=lambda s: s["start"])
    assert second["asked"] < first["end"], "the two never asked for the slot at once"
    assert second["start"] >= first["end"]  # what the lock guarantees: one holder at a time
    assert second["waited"] > 0  # and the second one waited for it


def test_shared_slots_overlap_each_other_but_not_a_timing(tmp_path: Path) -> None:
    inside = threading.Barrier(2, timeout=10)

    def checker() -> tuple[float, float]:
        with shared_slot(CPU, tmp_path, enabled=True) as slot:
            inside.wait()  # both shared holders are in at once
            time.sleep(0.2)
        return slot.acquired_at, slot.released_at or 0.0

    def timer() -> tuple[float, float]:
        time.sleep(0.05)  # ask while the checks hold the device
        with timing_slot(CPU, tmp_path, enabled=True) as slot:
            pass
        return slot.acquired_at, slot.released_at or 0.0

    (a, _, _), (b, _, _), (t, _, _) = concurrently(checker, checker, timer)
    assert t[0] >= max(a[1], b[1])  # the timing waited for both checks


def test_slots_off_nested_and_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with timing_slot(CPU, tmp_path) as slot:  # auto: no locking on the cpu backend
        assert not slot.locked
    monkeypatch.setenv(LOCK_ENV, "on")
    with timing_slot(CPU, tmp_path) as outer:
        with timing_slot(CPU, tmp_path) as inner:  # nested in one thread: no second lock, no deadlock
            assert outer.locked and not inner.locked
        held = threading.Event()
        result: list[BaseException] = []

        def other() -> None:
            try:
                with timing_slot(CPU, tmp_path, timeout=0.2):
                    held.set()
            except TimingSlotTimeout as exc:
                result.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert result and not held.is_set()
    assert isinstance(result[0], RuntimeError)  # evaluators turn it into a harness error


def test_device_identity_names_the_physical_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = Backend("cuda", "cuda:1", "NVIDIA H200", "sm_90")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bb/bb")
    assert device_identity(gpu) == "GPU-bb_bb"
    assert device_identity(CPU).startswith("cpu-")
