"""The fork server: forked children behave as freshly started ones (output, channel, exit status),
and nothing it forked outlives it."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudagym.forkserver import PREIMPORT_ENV, ForkServer, ForkServerError, returncode
from cudagym.sandbox import Child, ChildLimits, scrubbed_env


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    server = ForkServer(scrubbed_env(1, {"CUDA_VISIBLE_DEVICES": ""}))
    server.wait_ready()
    yield server
    server.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_forked_child_writes_to_its_own_stdout_and_its_exit_status_is_reported(server: ForkServer) -> None:
    process = server.spawn("probe", json.dumps({}), env=scrubbed_env(1, {"CUDA_VISIBLE_DEVICES": ""}))
    assert process.wait(timeout=30) == 0
    assert json.loads(process.stdout.read().decode().strip()) == {}  # the probe's report: no sandbox asked for
    os.close(process.channel)


def test_a_forked_candidate_warms_up_takes_a_job_and_reports_a_kill_as_the_signal(server: ForkServer) -> None:
    child = Child("candidate", limits=ChildLimits(), threads=1, env={"CUDA_VISIBLE_DEVICES": ""}, launcher=server)
    try:
        assert child.forked
        assert child.receive(time.monotonic() + 60) == {"stage": "warm"}
        assert child.alive and child.proc.poll() is None
        os.killpg(child.proc.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        child.kill()
    assert child.scratch is not None and not os.path.exists(child.scratch)


def test_the_childs_environment_is_its_own_not_the_servers(server: ForkServer, tmp_path: Path) -> None:
    (tmp_path / "model_new.py").write_text(
        "import json, os\n"
        "names = ('HOME', 'TMPDIR', 'CUDAGYM_SANDBOX_ID', 'MARKER')\n"
        "print('ENV', json.dumps({k: os.environ.get(k) for k in names}), flush=True)\n"
        "class ModelNew:\n    pass\n"
    )
    env = {"CUDA_VISIBLE_DEVICES": "", "MARKER": "this child"}
    child = Child("candidate", limits=ChildLimits(), threads=1, env=env, launcher=server)
    try:
        child.send({"mode": "import", "workspace": str(tmp_path)})
        assert child.receive_all(time.monotonic() + 60)
        assert {"stage": "done", "ok": True} in child.messages
        line = next(x for x in child.output.text().splitlines() if x.startswith("ENV "))
        seen = json.loads(line[4:])
        assert seen == {"HOME": child.scratch, "TMPDIR": child.scratch, "CUDAGYM_SANDBOX_ID": child.sandbox_id,
                        "MARKER": "this child"}  # fmt: skip
    finally:
        child.kill()


def test_returncode_reads_wait_statuses_as_popen_does() -> None:
    assert returncode(0) == 0
    assert returncode(3 << 8) == 3
    assert returncode(signal.SIGSEGV) == -signal.SIGSEGV


def test_closing_the_server_ends_what_it_forked_and_later_spawns_fail() -> None:
    server = ForkServer(scrubbed_env(1, {"CUDA_VISIBLE_DEVICES": ""}))
    child = Child("candidate", limits=ChildLimits(), threads=1, env={"CUDA_VISIBLE_DEVICES": ""}, launcher=server)
    child.receive(time.monotonic() + 60)
    pid = child.proc.pid
    server.close()
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert child.proc.poll() is not None  # counted as killed
    child.kill()
    with pytest.raises(ForkServerError):
        server.spawn("probe", "{}", env={})


def test_the_server_checks_that_its_forks_could_still_use_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch marks the forks of a process that queried the CUDA driver as unable to use CUDA; the server
    looks for that mark in a fork of itself before it says it is ready."""
    import torch

    from cudagym.harness import forkserver as harness

    assert harness.forks_can_use_cuda() == ""
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # what a driver query before the fork does
    assert "refuse CUDA" in harness.forks_can_use_cuda()


def started(env_extra: dict[str, str]) -> ForkServer:
    server = ForkServer({**scrubbed_env(1, {"CUDA_VISIBLE_DEVICES": ""}), **env_extra})
    server.wait_ready(120)
    return server


def test_the_server_preimports_the_profilers_modules_unless_told_not_to() -> None:
    for setting, expected in (({}, True), ({PREIMPORT_ENV: "0"}, False), ({PREIMPORT_ENV: "1"}, True)):
        server = started(setting)
        try:
            assert server.preimported is expected, setting
        finally:
            server.close()


def test_a_server_whose_preimports_spoil_its_forks_starts_again_without_them(tmp_path: Path) -> None:
    """As on a CUDA build where one of the profiler's modules queried the driver: torch would refuse CUDA in
    every fork, so the server starts itself again, plain, on the same socket and the same process."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "import torch.cuda\n"
        "torch.cuda._is_in_bad_fork = lambda: 'torch._dynamo' in sys.modules  # a driver query by that import\n"
    )
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    server = started({PREIMPORT_ENV: "1", "PYTHONPATH": path})
    try:
        assert server.ready and not server.preimported
        process = server.spawn("probe", json.dumps({}), env=scrubbed_env(1, {"CUDA_VISIBLE_DEVICES": ""}))
        assert process.wait(timeout=30) == 0
        os.close(process.channel)
        assert server.proc.poll() is None  # the same process, re-executed
    finally:
        server.close()
