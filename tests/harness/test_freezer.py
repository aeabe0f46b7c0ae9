"""The clock's hold on a CPU candidate (cudagym/harness/freezer.py): a whole process tree stops and goes on, a
process the tree forks while it is being stopped is stopped too, and memory is read and written while it is
stopped."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time

from cudagym.harness.freezer import Freezer, _stopped, read_memory, tree, write_memory

SPIN_TREE = """
import os, sys, time
child = os.fork()
if child == 0:
    while True:
        pass
print(child, flush=True)
while True:
    pass
"""


def _start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_a_frozen_tree_runs_no_more_and_goes_on_when_thawed() -> None:
    proc = _start(SPIN_TREE)
    try:
        grandchild = int(proc.stdout.readline())  # type: ignore[union-attr]
        freezer = Freezer(proc.pid)
        assert set(tree(proc.pid)) == {proc.pid, grandchild}
        freezer.freeze()
        assert set(freezer.frozen) == {proc.pid, grandchild}
        assert all(freezer._files and _stopped(pid, freezer._files) for pid in freezer.frozen)
        before = [_cpu_ticks(pid) for pid in freezer.frozen]
        time.sleep(0.3)
        assert [_cpu_ticks(pid) for pid in freezer.frozen] == before  # stopped: no CPU time at all
        freezer.thaw()
        time.sleep(0.3)
        assert all(_cpu_ticks(pid) > tick for pid, tick in zip(freezer.frozen or tree(proc.pid), before, strict=True))
        freezer.close()
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
        proc.kill()


MEMORY = """
import ctypes, sys
buffer = ctypes.create_string_buffer(b"before!!", 8)
print(ctypes.addressof(buffer), flush=True)
sys.stdin.readline()
print(buffer.raw.decode(), flush=True)
"""


def test_memory_is_read_and_written_while_the_process_is_frozen() -> None:
    proc = subprocess.Popen([sys.executable, "-c", MEMORY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = int(proc.stdout.readline())  # type: ignore[union-attr]
        freezer = Freezer(proc.pid)
        freezer.freeze()
        mine = ctypes.create_string_buffer(8)
        read_memory(proc.pid, address, ctypes.addressof(mine), 8)
        assert mine.raw == b"before!!"
        theirs = ctypes.create_string_buffer(b"poisoned", 8)
        write_memory(proc.pid, address, ctypes.addressof(theirs), 8)
        freezer.thaw()
        out, _ = proc.communicate("\n", timeout=10)
        assert out.strip() == "poisoned"
        freezer.close()
    finally:
        proc.kill()
