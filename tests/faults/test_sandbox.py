"""The sandbox's own decisions, without an env: what each child gets by default, the bounded output
capture, and that kill() leaves nothing behind (``test_leftovers.py`` has the attacks)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import pytest

from cudagym.sandbox import (
    RESERVED_PIDS,
    Child,
    ChildLimits,
    Isolation,
    OutputCapture,
    default_memory_bytes,
    isolation_status,
    network_isolation_available,
    resolve_isolation,
    sandbox_processes,
    scrubbed_env,
)

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # what a child of the cpu backend sees on any machine


def spec_of(child: Child) -> dict:
    return json.loads(child.proc.args[-1])


def test_a_cpu_candidate_gets_the_default_caps_and_every_namespace_the_machine_allows() -> None:
    status = isolation_status()
    child = Child("candidate", limits=ChildLimits(), env=NO_GPU)
    try:
        assert child.memory_bytes == default_memory_bytes() > 0
        spec = spec_of(child)
        assert spec["rlimits"]["RLIMIT_AS"] == child.memory_bytes and spec["processes"] == 1024
        user = status.works("user")
        assert child.isolation.network == (user and status.works("network"))
        assert child.isolation.processes == (user and status.works("pids"))
        assert child.isolation.readonly_filesystem == (user and status.works("readonly"))
        if child.isolation.processes and status.works("pid_max"):
            assert child.isolation.pid_max == RESERVED_PIDS + 3 + 1024
        if all(status.works(step) for step in ("user", "network", "pids", "readonly")):
            assert child.isolation.notes == ()
        assert child.scratch is not None and os.path.isdir(child.scratch)
        assert child.exchange is not None and os.path.isdir(child.exchange)
        if child.isolation.readonly_filesystem:
            assert child.scratch in child.isolation.writable and child.exchange in child.isolation.writable
        # of the real /dev/shm it writes only its exchange folder: with a read-only file system, a /dev/shm of its own
        assert child.isolation.private_shm == child.isolation.readonly_filesystem
        assert spec["guard"] == (not child.isolation.processes)  # no PID namespace: a guard instead
        assert sandbox_processes(child.sandbox_id)
    finally:
        child.kill()
    assert child.killed and not os.path.exists(child.scratch) and not os.path.exists(child.exchange)
    assert sandbox_processes(child.sandbox_id) == []


def test_the_reference_is_trusted_and_a_wrapped_run_keeps_the_host_namespaces() -> None:
    reference = Child("reference", limits=ChildLimits())
    try:
        assert reference.memory_bytes is None and reference.isolation == Isolation() and reference.scratch is None
        spec = spec_of(reference)
        assert spec["processes"] is None and spec["sandbox"] == {} and "RLIMIT_AS" not in spec["rlimits"]
    finally:
        reference.kill()
    wrapped = Child("candidate", limits=ChildLimits(), env=NO_GPU, prefix=("/usr/bin/env",))
    try:
        assert not wrapped.isolation.any and "no namespaces for a run wrapped by env" in wrapped.isolation.summary()
    finally:
        wrapped.kill()
    switched_off = Child(
        "candidate",
        limits=ChildLimits(isolate_network=False, isolate_processes=False, readonly_filesystem=False),
        env=NO_GPU,
    )
    try:
        assert switched_off.isolation == Isolation() and spec_of(switched_off)["sandbox"] == {}
        assert spec_of(switched_off)["guard"] and not spec_of(reference)["guard"]  # candidates only
    finally:
        switched_off.kill()


def test_a_private_dev_shm_comes_with_the_read_only_file_system_unless_dev_shm_itself_is_writable() -> None:
    status = isolation_status()
    readonly = status.works("user") and status.works("readonly") and os.path.isdir("/dev/shm")

    def resolved(writable: tuple[str, ...], **switches: bool) -> Isolation:
        return resolve_isolation(ChildLimits(**switches), role="candidate", env=NO_GPU, prefix=(), writable=writable)

    assert resolved(("/tmp/cudagym-scratch", "/dev/shm/cudagym-x-1")).private_shm == readonly
    assert not resolved(("/tmp/cudagym-scratch", "/dev/shm/cudagym-x-1", "/dev/shm")).private_shm
    assert not resolved(("/dev/shm/cudagym-x-1",), readonly_filesystem=False).private_shm
    if readonly:
        assert "private /dev/shm" in resolved(("/dev/shm/cudagym-x-1",)).summary()


def test_network_isolation_is_reported_with_its_reason() -> None:
    available, reason = network_isolation_available()
    assert available == isolation_status().works("network")
    assert reason and (available or isolation_status().network in reason)


@pytest.mark.parametrize(("size", "dropped"), [(1000, False), (3 * 1024 * 1024, True)])
def test_output_capture_keeps_head_and_tail_and_counts_the_rest(size: int, dropped: bool) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdout.write('h' + 'x' * {size - 2} + 't')"],
        stdout=subprocess.PIPE,
    )
    capture = OutputCapture(writer.stdout, head=4096, tail=4096)
    writer.wait(timeout=30)
    text = capture.text(wait=10)
    assert capture.total == size and text.startswith("h")
    if dropped:
        assert len(text) < 8192 + 200 and text.rstrip().endswith(
            f"[the process wrote {size} bytes of output; {size - 8192} bytes in the middle were dropped]"
        )
        assert f"[... {size - 8192} bytes omitted ...]" in text
    else:
        assert text.endswith("t") and len(text) == size


def test_a_child_dropped_without_kill_takes_its_processes_and_scratch_with_it() -> None:
    child = Child("candidate", limits=ChildLimits(), env=NO_GPU)
    sandbox_id, scratch = child.sandbox_id, child.scratch
    assert scratch is not None and sandbox_processes(sandbox_id)
    del child
    gc.collect()
    assert not os.path.exists(scratch)
    deadline = time.monotonic() + 10
    while sandbox_processes(sandbox_id) and time.monotonic() < deadline:
        time.sleep(0.05)  # killed; the kernel takes a moment to take a PID namespace down
    assert sandbox_processes(sandbox_id) == []


ONE_SWITCH = {
    "network": ("isolate_network", ("network",)),
    "processes": ("isolate_processes", ("pids", "proc")),
    "readonly": ("readonly_filesystem", ("readonly",)),
}


@pytest.mark.parametrize("name", list(ONE_SWITCH))
def test_each_namespace_switch_works_on_its_own(name: str) -> None:
    """A PID namespace without the read-only file system still gets its private /proc (a mount namespace of
    its own), and every switch alone leaves a candidate able to start."""
    switch, steps = ONE_SWITCH[name]
    status = isolation_status()
    if not all(status.works(step) for step in ("user", *steps)):
        pytest.skip(f"{name} is not available on this machine")
    off = {"isolate_network": False, "isolate_processes": False, "readonly_filesystem": False}
    child = Child("candidate", limits=ChildLimits(**{**off, switch: True}), threads=1, env=NO_GPU)
    try:
        assert child.receive(time.monotonic() + 120) == {"stage": "warm"}, child.output.text()
        assert child.isolation.any and child.isolation.summary().startswith(
            {"network": "network namespace", "processes": "PID namespace", "readonly": "read-only"}[name]
        )
    finally:
        child.kill()


def test_cpu_children_wait_passively_in_openmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread count (the cpu backend) comes with passive OpenMP waits: a spinning thread would hold the core the
    thread it waits for needs, and its spin would be run time the trusted clock charges (harness/cputime.py)."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cpu = scrubbed_env(2)
    assert cpu["OMP_WAIT_POLICY"] == "PASSIVE" and cpu["OMP_NUM_THREADS"] == "2"
    assert "OMP_WAIT_POLICY" not in scrubbed_env(0)  # cuda children keep the library's default
