"""The run times the trusted clock charges a cpu candidate (cudagym/harness/cputime.py), read from the kernel."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from cudagym.harness import cputime
from cudagym.harness.cputime import Snapshot, TreeTimes

# two threads burn 0.15 s of processor time each (numpy's loops let go of the interpreter lock), then sleep: the wall
# time the process is thawed for is far longer than what it ran
BURNER = """
import sys, threading, time
import numpy as np
def burn():
    a = np.ones(1 << 16)
    start = time.thread_time()
    while time.thread_time() - start < 0.15:
        np.sqrt(a, out=a)
    time.sleep(30)  # alive, idle: its own account stays readable
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
for _ in range(2):
    threading.Thread(target=burn, daemon=True).start()
time.sleep(30)
"""


def test_what_ran_between_two_snapshots_charges_the_busiest_thread_or_all_over_p() -> None:
    before = Snapshot({(1, 1): 100_000, (1, 2): 0}, {1: 100_000})
    after = Snapshot({(1, 1): 300_000, (1, 2): 150_000, (1, 3): 250_000}, {1: 800_000, 2: 50_000})
    ran = cputime.spent(before, after, threads=2)
    assert ran.busiest_us == 250.0  # a thread that appeared in between counts from zero
    assert ran.total_us == 750.0  # every process, a new one from zero
    assert ran.charged_us == 375.0  # all threads over two cores exceed the busiest thread
    assert cputime.spent(before, after, threads=8).charged_us == 250.0
    assert not cputime.spent(before, after, threads=2).tree_changed  # no tree recorded: the same empty one
    grown = dataclasses.replace(after, pids=frozenset({1, 2}))
    assert cputime.spent(dataclasses.replace(before, pids=frozenset({1})), grown, threads=2).tree_changed
    # the same tree, but a child came, worked and was waited for in between: its run time is only in the reaped count
    assert cputime.spent(before, dataclasses.replace(after, reaped=5), threads=2).tree_changed


def test_a_snapshot_counts_the_run_time_of_children_waited_for() -> None:
    code = (
        "import os, time\n"
        "t = time.process_time()\n"
        "if os.fork() == 0:\n"
        "    while time.process_time() - t < 0.1: pass\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "print('done', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    times = TreeTimes()
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        assert times.snapshot([proc.pid]).reaped >= 5  # 100 ms of the child's run time, in ticks of 10 ms
    finally:
        proc.kill()
        proc.wait()
        times.close()


def test_a_stopped_process_is_charged_what_its_threads_ran_not_the_wall_time() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    times = TreeTimes()
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        if not times.available(proc.pid):
            pytest.skip("this kernel does not account per-thread run times (/proc/<pid>/schedstat)")
        os.kill(proc.pid, signal.SIGSTOP)
        before = times.snapshot([proc.pid])
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wall = time.monotonic()
        time.sleep(2.0)  # the burn is over long before: the rest is sleep
        os.kill(proc.pid, signal.SIGSTOP)
        wall = time.monotonic() - wall
        ran = cputime.spent(before, times.snapshot([proc.pid]), threads=2)
        assert 140_000 <= ran.busiest_us <= 400_000, ran  # one burner's 0.15 s (and the start-up it did meanwhile)
        assert 290_000 <= ran.total_us <= 800_000, ran  # both burners
        assert ran.charged_us < wall * 1e6 / 2, (ran, wall)
    finally:
        times.close()
        proc.kill()
        proc.wait()
