"""Nothing a candidate leaves outlives its stage: files in /dev/shm (its private one, or its exchange folder) and
processes that left its session, double-forked and cleared their environment, with and without namespaces, forked
from the fork server or started as new interpreters; and honest candidates can still use shared memory.

The candidates here are started directly (``Child``), with a ``model_new.py`` that does its work at import
(the job of a single-file compile), so no env and no reference process are needed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudagym.forkserver import ForkServer
from cudagym.sandbox import SHM_DIR, Child, ChildLimits, isolation_status, sandbox_processes, scrubbed_env

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
STATUS = isolation_status()
NAMESPACES = {
    "namespaces": {"isolate_network": True, "isolate_processes": True, "readonly_filesystem": True},
    "no-namespaces": {"isolate_network": False, "isolate_processes": False, "readonly_filesystem": False},
    # a read-only file system (so a private /dev/shm) without a PID namespace: the guard's case with mounts
    "readonly-only": {"isolate_network": False, "isolate_processes": False, "readonly_filesystem": True},
}

# The candidate: a process made with the raw fork system call (no libc fork handlers) leaves the session and
# executes Python with an empty environment, which double-forks; the last one reports its pid through the
# exchange folder and stays. Then the candidate writes into its private /dev/shm and its exchange folder, and
# waits: until it is killed, or (LINGER False) until the test tells it to end.
LEAVER = r"""
import ctypes, os, platform, sys, time
EXCHANGE, TOKEN, LINGER = {exchange!r}, {token!r}, {linger!r}
ESCAPE = '''
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
null = os.open('/dev/null', os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
open(os.path.join(sys.argv[1], 'escaped'), 'w').write(str(os.getpid()))
while True:
    time.sleep(1)
'''
libc = ctypes.CDLL(None, use_errno=True)
pid = libc.syscall(57) if platform.machine() == 'x86_64' else libc.syscall(220, 17, 0, 0, 0, 0)  # fork / clone
if pid == 0:
    os.setsid()
    os.execve(sys.executable, [sys.executable, '-c', ESCAPE, EXCHANGE, TOKEN], {{}})
os.waitpid(pid, 0)
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(EXCHANGE, 'escaped')) and time.monotonic() < deadline:
    time.sleep(0.01)
open('/dev/shm/' + TOKEN, 'w').write('left in /dev/shm')
open(os.path.join(EXCHANGE, 'left'), 'w').write('left in the exchange folder')
open(os.path.join(EXCHANGE, 'ready'), 'w').write('')
deadline = time.monotonic() + (600 if LINGER else 60)  # killed in the stage, or told to end (the file 'go')
while not os.path.exists(os.path.join(EXCHANGE, 'go')) and time.monotonic() < deadline:
    time.sleep(0.01)
class ModelNew:
    pass
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    server = ForkServer(scrubbed_env(1, NO_GPU))
    server.wait_ready()
    yield server
    server.close()


def escapees(token: str) -> list[int]:
    """Live processes whose command line holds ``token`` (the escapee's marker)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if state not in (b"Z", b"X") and token.encode() in cmdline:
            found.append(int(entry))
    return found


def gone(token: str, within: float = 1.0) -> bool:
    """True when no escapee is left (within ``within`` seconds: the kernel finishes killed processes)."""
    deadline = time.monotonic() + within
    while escapees(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def skip_unless_available(name: str) -> None:
    if name == "no-namespaces":
        return
    steps = ("user", "readonly") + (("network", "pids") if name == "namespaces" else ())
    missing = [f"{step}: {getattr(STATUS, step)}" for step in steps if not STATUS.works(step)]
    if missing:
        pytest.skip(f"not available here ({'; '.join(missing)})")


@pytest.mark.parametrize("ending", ["killed", "exits"])
@pytest.mark.parametrize("forked", [False, True], ids=["new-interpreter", "fork-server"])
@pytest.mark.parametrize("name", list(NAMESPACES))
def test_what_a_candidate_leaves_is_gone_after_the_stage(
    name: str, forked: bool, ending: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    skip_unless_available(name)
    launcher = request.getfixturevalue("server") if forked else None
    limits = ChildLimits(processes=64, **NAMESPACES[name])
    child = Child("candidate", limits=limits, threads=1, env=NO_GPU, launcher=launcher, cwd=tmp_path)
    token = f"cudagym-leftover-{secrets.token_hex(6)}"
    leak = Path(SHM_DIR, token)
    try:
        assert child.exchange is not None and child.exchange.startswith(SHM_DIR + "/")
        assert child.isolation.private_shm == (name != "no-namespaces"), child.isolation.summary()
        assert child.isolation.processes == (name == "namespaces")
        linger = ending == "killed"
        source = LEAVER.format(exchange=child.exchange, token=token, linger=linger)
        (tmp_path / "model_new.py").write_text(source)
        child.send({"mode": "import", "workspace": str(tmp_path)})
        deadline = time.monotonic() + 90
        while not Path(child.exchange, "ready").exists():
            assert child.alive and time.monotonic() < deadline, child.output.text()
            time.sleep(0.02)
        assert escapees(token), "the escapee did not start"
        assert not set(escapees(token)) & set(sandbox_processes())  # its sandbox id cannot find the escapee
        assert Path(child.exchange, "left").is_file()  # bound back in: the trusted side sees it
        assert leak.exists() == (not child.isolation.private_shm)  # a private /dev/shm: never on the host
        if ending == "exits":
            Path(child.exchange, "go").write_text("")
            assert child.receive_all(time.monotonic() + 60), child.output.text()
            assert child.wait(30) == 0, child.output.text()
            assert gone(token), "the candidate ended and its escapee lived on"
        child.kill()
        assert gone(token), "the stage ended and the escapee lived on"
        assert not os.path.exists(child.exchange)
        # where the candidate writes the real /dev/shm (no read-only file system) what it leaves there stays:
        # the README's "What remains"
        assert leak.exists() == (name == "no-namespaces")
    finally:
        child.kill()
        leak.unlink(missing_ok=True)


@pytest.mark.parametrize("forked", [False, True], ids=["new-interpreter", "fork-server"])
def test_an_honest_candidate_uses_its_private_shared_memory(
    forked: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """torch's shared tensors and Python's shared memory live in /dev/shm: a private one serves them as well."""
    skip_unless_available("namespaces")
    launcher = request.getfixturevalue("server") if forked else None
    (Path(SHM_DIR) / f"cudagym-host-{os.getpid()}").write_text("the host's")
    child = Child("candidate", limits=ChildLimits(), threads=1, env=NO_GPU, launcher=launcher)
    try:
        assert child.isolation.private_shm and child.exchange is not None
        (tmp_path / "model_new.py").write_text(
            "import json, os\n"
            "from multiprocessing import shared_memory\n"
            "import torch\n"
            "shared = torch.arange(4.0).share_memory_()\n"
            "block = shared_memory.SharedMemory(create=True, size=4096)\n"
            "block.buf[:3] = b'abc'\n"
            "seen = sorted(os.listdir('/dev/shm'))\n"
            f"open(os.path.join({child.exchange!r}, 'seen'), 'w').write(json.dumps(seen))\n"
            "print('SHARED', float(shared.sum()), bytes(block.buf[:3]), flush=True)\n"
            "block.close()\n"
            "block.unlink()\n"
            "class ModelNew:\n    pass\n"
        )
        child.send({"mode": "import", "workspace": str(tmp_path)})
        assert child.receive_all(time.monotonic() + 90)
        assert {"stage": "done", "ok": True} in child.messages, child.output.text()
        assert "SHARED 6.0 b'abc'" in child.output.text()
        seen = json.loads(Path(child.exchange, "seen").read_text())
        assert os.path.basename(child.exchange) in seen and f"cudagym-host-{os.getpid()}" not in seen
    finally:
        child.kill()
        (Path(SHM_DIR) / f"cudagym-host-{os.getpid()}").unlink(missing_ok=True)
