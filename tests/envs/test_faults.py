"""The fault suite on the CPU backend: hostile or broken code in the agent's kernels comes back as an
observation that names what happened, the same env then completes a correct episode, and after
``close()`` no process and no temporary file of the env is left.

The faults run through a real :class:`CudaKernelEnv` with the static integrity checks switched off:
what is tested here is the run-time containment of code that got past them (they are tested in
``tests/adversarial``). One env is shared by the faults of each isolation mode, so the reference
process and the measured baselines are set up once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import RELU, relu_solution, write_all
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.integrity.policy import RULES, IntegrityPolicy
from cudagym.sandbox import (
    HARNESS_DIR,
    RESERVED_PIDS,
    Child,
    ChildLimits,
    exchange_dir,
    isolation_status,
    sandbox_processes,
)
from cudagym.tasks import load
from cudagym.tools import TOOLS_BY_NAME, ParseFailure, parse_action

VERIFY_TIMEOUT = 15
# a handshake unanswered after this long (the reference's calls are microseconds) is a hung candidate
HANG_SECONDS = 6.0
# The ReLU task at 64K elements: the faults do not need large data, and the episodes around them stay short.
BUILTIN_RELU = load("builtin").get(RELU)
SMALL_RELU = dataclasses.replace(
    BUILTIN_RELU, metadata=dataclasses.replace(BUILTIN_RELU.metadata, sizes={"cpu": {"N": 1 << 16}})
)
MEMORY_CAP = 3 * 1024**3  # address space of a candidate in these envs (a torch process uses about 0.8 GiB)
TASK_ALLOWANCE = 64  # processes and threads a candidate may add
STATUS = isolation_status()
# On (not "auto", which leaves them off for candidates that see a GPU): each applies where STATUS says it works.
NAMESPACES_ON = {"isolate_network": True, "isolate_processes": True, "readonly_filesystem": True}
NAMESPACES_OFF = {"isolate_network": False, "isolate_processes": False, "readonly_filesystem": False}


def kernel(*lines: str) -> str:
    """A replacement for kernels/relu.cpp (the ReLU binding calls ``relu_kernel``)."""
    return "\n".join(["#include <cstdint>", *lines, ""])


SEGFAULT = kernel(
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  volatile float* bad = nullptr;",
    "  for (int64_t i = 0; i < n; ++i) bad[i] = x[i];  // writes through a null pointer",
    "}",
)
INFINITE_LOOP = kernel(
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  volatile int64_t i = 0;",
    "  while (true) { i = i + 1; }  // never returns",
    "}",
)
SLOW_BUT_FINISHING = kernel(  # each call sleeps a third of the hang bound, then computes ReLU: honest, only slow
    "#include <chrono>",
    "#include <thread>",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    f"  std::this_thread::sleep_for(std::chrono::milliseconds({int(HANG_SECONDS * 1000 / 3)}));",
    "  for (int64_t j = 0; j < n; ++j) y[j] = x[j] > 0.0f ? x[j] : 0.0f;",
    "}",
)
ABORT = kernel("#include <cstdlib>", "void relu_kernel(const float* x, float* y, int64_t n) { std::abort(); }")
FORK_BOMB = kernel(
    "#include <cerrno>",
    "#include <csignal>",
    "#include <cstdlib>",
    "#include <cstring>",
    "#include <sched.h>",
    "#include <stdexcept>",
    "#include <string>",
    "#include <unistd.h>",
    "// Each new process leaves the session and stays. They share the candidate's memory (CLONE_VM): as many",
    "// processes as fork() would make, without copying a torch process's page tables for each.",
    "static int stay(void*) { setsid(); while (true) pause(); return 0; }",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  int started = 0;",
    "  while (true) {",
    "    char* stack = static_cast<char*>(std::malloc(64 * 1024));",
    "    if (clone(stay, stack + 64 * 1024, CLONE_VM | SIGCHLD, nullptr) < 0) {",
    "      int err = errno;",
    '      throw std::runtime_error("fork failed after " + std::to_string(started) + " processes: " +',
    "                               std::strerror(err));",
    "    }",
    "    ++started;",
    "  }",
    "}",
)
MEMORY_BOMB = kernel(
    "#include <cstring>",
    "#include <vector>",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  static std::vector<char*> hoard;",
    # 64 MiB at a time until new throws std::bad_alloc: the cap is on address space, so a block's first byte is
    # written (it is really taken) and the rest left untouched, which would only cost page faults up to the cap
    "  while (true) {",
    "    char* block = new char[64 << 20];",
    "    std::memset(block, 1, 1);",
    "    hoard.push_back(block);",
    "  }",
    "}",
)
STDOUT_FLOOD = kernel(
    "#include <cstdio>",
    "#include <stdexcept>",
    "#include <vector>",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  std::vector<char> block(1 << 20, 'x');",
    "  for (int i = 0; i < 1024; ++i) std::fwrite(block.data(), 1, block.size(), stdout);",
    "  std::fflush(stdout);",
    '  throw std::runtime_error("wrote 1 GiB to stdout");',
    "}",
)
SESSION_LEAVERS = kernel(
    "#include <stdexcept>",
    "#include <unistd.h>",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  for (int i = 0; i < 3; ++i) {",
    "    if (fork() == 0) {  // a child that leaves the session, lets go of every pipe and orphans a grandchild",
    "      setsid();",
    "      for (int fd = 0; fd < 1024; ++fd) close(fd);",
    "      if (fork() == 0) { while (true) pause(); }",
    "      _exit(0);",
    "    }",
    "  }",
    '  throw std::runtime_error("left 3 processes behind in new sessions");',
    "}",
)
OUT_OF_BOUNDS = kernel(
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    "  for (int64_t i = 0; i < n; ++i) y[i + (int64_t(1) << 40)] = x[i];  // far past the end of y",
    "}",
)
WARNS_THEN_RAISES = (
    "import warnings, torch\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        print('my own print', flush=True)\n"
    "        warnings.warn('my own warning')\n"
    "        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])\n"
    "        for _ in range(2):  # a second cycle: torch warns that the profiler clears its events\n"
    "            profiler.start()\n"
    "            profiler.stop()\n"
    "        raise ValueError('done warning')\n"
)
RAISES = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        raise ValueError('boom')\n"
BAD_IMPORT = "import torch\nimport does_not_exist\nclass ModelNew(torch.nn.Module):\n    pass\n"
LIMITS_PROBE = (
    "import resource, torch\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        names = ('RLIMIT_NOFILE', 'RLIMIT_CORE', 'RLIMIT_AS', 'RLIMIT_NPROC')\n"
    "        limits = {n: resource.getrlimit(getattr(resource, n)) for n in names}\n"
    "        raise ValueError(f'limits={limits}')\n"
)


def write_attempts(targets: dict[str, str], delete: str) -> str:
    """A kernel that tries to create a file at each target (``$TMPDIR`` is expanded) and to delete
    ``delete``, then throws a report: ``name: written`` or ``name: <strerror>`` for each."""
    lines = [
        "#include <cerrno>",
        "#include <cstdio>",
        "#include <cstdlib>",
        "#include <cstring>",
        "#include <stdexcept>",
        "#include <string>",
        "static std::string attempt(const std::string& name, const std::string& path) {",
        '  FILE* f = std::fopen(path.c_str(), "w");',
        '  if (f == nullptr) return name + ": " + std::strerror(errno) + "; ";',
        '  std::fputs("written by the candidate\\n", f);',
        "  std::fclose(f);",
        '  return name + ": written; ";',
        "}",
        "void relu_kernel(const float* x, float* y, int64_t n) {",
        "  std::string report;",
    ]
    for name, path in targets.items():
        expr = (
            f'std::string(std::getenv("TMPDIR")) + "{path[len("$TMPDIR") :]}"'
            if path.startswith("$TMPDIR")
            else f'"{path}"'
        )
        lines.append(f'  report += attempt("{name}", {expr});')
    lines += [
        f'  int removed = std::remove("{delete}");',
        '  report += std::string("delete: ") + (removed == 0 ? "deleted" : std::strerror(errno));',
        "  throw std::runtime_error(report);",
        "}",
    ]
    return kernel(*lines)


def connect_attempts(port: int) -> str:
    """A kernel that tries to connect to 127.0.0.1:``port`` and to 1.1.1.1:53 and throws what happened."""
    return kernel(
        "#include <arpa/inet.h>",
        "#include <cerrno>",
        "#include <cstring>",
        "#include <netinet/in.h>",
        "#include <stdexcept>",
        "#include <string>",
        "#include <sys/socket.h>",
        "#include <unistd.h>",
        "static std::string attempt(const char* host, int port) {",
        "  int fd = socket(AF_INET, SOCK_STREAM, 0);",
        '  if (fd < 0) return std::string("socket: ") + std::strerror(errno);',
        "  sockaddr_in address{};",
        "  address.sin_family = AF_INET;",
        "  address.sin_port = htons(port);",
        "  inet_pton(AF_INET, host, &address.sin_addr);",
        "  int rc = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);",
        '  std::string result = rc == 0 ? "connected" : std::strerror(errno);',
        "  close(fd);",
        '  return std::string(host) + ":" + std::to_string(port) + " " + result;',
        "}",
        "void relu_kernel(const float* x, float* y, int64_t n) {",
        f'  throw std::runtime_error("connect " + attempt("127.0.0.1", {port}) + "; " + attempt("1.1.1.1", 53));',
        "}",
    )


# -- the envs and what they leave behind ------------------------------------------------------------------


@dataclasses.dataclass
class Leftovers:
    """What an env created: its child processes and its temporary directories (outside the cache)."""

    cache: Path
    children: list[Child] = dataclasses.field(default_factory=list)
    directories: list[str] = dataclasses.field(default_factory=list)

    def processes(self) -> list[int]:
        """Processes left by children that were killed (the warm spare for the next stage is not one)."""
        return [pid for child in self.children if child.killed for pid in sandbox_processes(child.sandbox_id)]

    def files(self) -> list[str]:
        return [d for d in self.directories if os.path.exists(d) and not Path(d).is_relative_to(self.cache)]


@contextlib.contextmanager
def recording(cache: Path) -> Iterator[Leftovers]:
    """Records the children started and the temporary directories made while it is open."""
    record = Leftovers(cache)
    child_init, mkdtemp = Child.__init__, tempfile.mkdtemp

    def recording_init(self: Child, *args: Any, **kwargs: Any) -> None:
        child_init(self, *args, **kwargs)
        record.children.append(self)

    def recording_mkdtemp(*args: Any, **kwargs: Any) -> str:
        path = mkdtemp(*args, **kwargs)
        record.directories.append(path)
        return path

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Child, "__init__", recording_init)
        patch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
        yield record


def assert_nothing_outlives(env: CudaKernelEnv, record: Leftovers) -> None:
    """Closes ``env`` (again) and checks that none of its processes and temporary directories is left."""
    env.close()
    assert record.children and all(child.killed for child in record.children)
    assert record.processes() == []
    assert record.files() == []


def fault_config(fast_config: EvalConfig, namespaces: dict[str, bool]) -> EvalConfig:
    return dataclasses.replace(
        fast_config,
        num_checks=1,  # one input set is enough to run into each fault
        check_determinism=False,
        verify_timeout=VERIFY_TIMEOUT,
        profile_timeout=30,
        hang_seconds=HANG_SECONDS,
        limits=ChildLimits(memory_bytes=MEMORY_CAP, processes=TASK_ALLOWANCE, **namespaces),
        policy=IntegrityPolicy(disabled_checks=frozenset(RULES)),
    )


def recorded_env(
    fast_config: EvalConfig, cache_dir: Path, namespaces: dict[str, bool], max_turns: int
) -> Iterator[tuple[CudaKernelEnv, Leftovers]]:
    """A warmed-up fault env and the record of what it started; after it, nothing of it may be left."""
    with recording(cache_dir) as record:
        config = fault_config(fast_config, namespaces)
        env = CudaKernelEnv([SMALL_RELU], backend="cpu", eval_config=config, max_turns=max_turns)
        try:
            warm_up(env)
            yield env, record
        finally:
            env.close()
        assert_nothing_outlives(env, record)


@pytest.fixture(scope="module")
def fault_env(fast_config: EvalConfig, cache_dir: Path) -> Iterator[tuple[CudaKernelEnv, Leftovers]]:
    """The env of the fault suite, with every isolation this machine offers."""
    yield from recorded_env(fast_config, cache_dir, NAMESPACES_ON, max_turns=10_000)


@pytest.fixture
def env(fault_env: tuple[CudaKernelEnv, Leftovers]) -> CudaKernelEnv:
    return fault_env[0]


def warm_up(env: CudaKernelEnv) -> None:
    """Starts the reference process, whose start counts against the first stage's timeout (which may run out
    on a loaded machine): each fault's stage then holds only the candidate."""
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    env.step(tool_call("verify"))


def finish_correct_episode(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] >= 1 and reward >= 1, obs


def verify_with(env: CudaKernelEnv, files: dict[str, str]) -> tuple[str, dict[str, Any], float]:
    """A fresh episode with the ReLU solution changed by ``files``; returns verify's (obs, info, seconds)."""
    env.reset(options={"task_id": RELU})
    write_all(env, {**relu_solution(), **files})
    start = time.monotonic()
    obs, reward, terminated, truncated, info = env.step(tool_call("verify"))
    assert reward == 0 and not terminated and not truncated
    assert set(obs) <= set(string.printable)
    return obs, info, time.monotonic() - start


# -- faults -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "status", "needle"),
    [
        (SEGFAULT, "crash", "killed by SIGSEGV"),
        (ABORT, "crash", "killed by SIGABRT"),
    ],
    ids=["segfault", "abort"],
)
def test_native_faults_are_observations(env: CudaKernelEnv, source: str, status: str, needle: str) -> None:
    obs, info, seconds = verify_with(env, {"kernels/relu.cpp": source})
    assert info["status"] == status and needle in obs, obs
    assert_says_what_happened_and_what_next(obs, f"[verify] {status.upper()}", "then verify again")
    assert seconds < VERIFY_TIMEOUT + 10
    finish_correct_episode(env)


def assert_says_what_happened_and_what_next(obs: str, first: str, next_words: str) -> None:
    """The observation opens with what happened and what to do, and carries none of the harness's noise."""
    lines = obs.splitlines()
    assert lines[0].startswith(first) and lines[1].startswith("Next: ") and next_words in lines[1], obs
    for noise in ("<harness>", "site-packages", "frame #", "Extension modules"):
        assert noise not in obs, (noise, obs)
    assert len(obs) < 4000, obs


def test_an_out_of_bounds_write_in_a_cpu_kernel_names_the_signal_its_cause_and_the_calling_line(
    env: CudaKernelEnv,
) -> None:
    obs, info, _ = verify_with(env, {"kernels/relu.cpp": OUT_OF_BOUNDS})
    assert info["status"] == "crash" and info["result"]["signal"] == "SIGSEGV", obs
    assert "killed by SIGSEGV while running ModelNew" in obs, obs
    assert_says_what_happened_and_what_next(obs, "[verify] CRASH", "index past a buffer's end")
    # faulthandler's stack in the candidate: the line of model_new.py that called into the kernel
    assert 'File "model_new.py", line' in obs and "Fatal Python error: Segmentation fault" in obs, obs


def test_the_candidates_own_output_stays_and_the_profilers_warnings_go(env: CudaKernelEnv) -> None:
    obs, info, _ = verify_with(env, {"model_new.py": WARNS_THEN_RAISES})
    assert info["status"] == "runtime_error", obs
    assert_says_what_happened_and_what_next(obs, "[verify] RUNTIME ERROR", "then verify again")
    assert "ValueError while running ModelNew: done warning" in obs.splitlines()[0]
    assert "my own warning" in obs and "my own print" in obs, obs  # the candidate's own, kept
    assert "Profiler clears events" not in obs and "profiler_start" not in obs, obs  # torch's profiler, left out
    assert "Profiler clears events" in info["result"]["stderr"]  # the result keeps the evidence whole


def timed_step(env: CudaKernelEnv, action: str) -> tuple[str, float, bool, dict[str, Any], float]:
    """One step; returns (obs, reward, terminated, info, seconds it took)."""
    start = time.monotonic()
    obs, reward, terminated, _, info = env.step(action)
    return obs, reward, terminated, info, time.monotonic() - start


def edit_kernel(env: CudaKernelEnv, old: str, new: str) -> dict[str, Any]:
    """edit_file on kernels/relu.cpp; returns the step's info."""
    return env.step(tool_call("edit_file", path="kernels/relu.cpp", old_string=old, new_string=new))[4]


def test_an_infinite_loop_times_out_once_until_its_files_change(env: CudaKernelEnv) -> None:
    """One verify timeout, found by the call that never answers (the hang bound, not the stage's timeout), then
    verify, profile and submit on the same files answer at once with it (the cudagym.stage_memo); an edit runs for
    real; the looping files written again are known by their content."""
    timed_out = "a hung or runaway kernel"
    obs, info, seconds = verify_with(env, {"kernels/relu.cpp": INFINITE_LOOP})
    assert info["status"] == "timeout" and timed_out in obs, obs
    assert f"its call did not return within {HANG_SECONDS:.1f} s" in obs, obs
    assert HANG_SECONDS <= seconds < VERIFY_TIMEOUT, seconds
    for tool in ("verify", "profile"):
        obs, reward, terminated, info, seconds = timed_step(env, tool_call(tool))
        assert info["status"] == "timeout" and reward == 0 and not terminated, obs
        assert "Not run again: the same files timed out in verify" in obs and timed_out in obs, obs
        assert seconds < 1.0, (tool, seconds)
    loop = "  while (true) { i = i + 1; }  // never returns"
    relu = "  for (int64_t j = 0; j < n; ++j) y[j] = x[j] > 0.0f ? x[j] : 0.0f;"
    assert edit_kernel(env, loop, relu)["status"] == "ok"
    obs, _, _, info, _ = timed_step(env, tool_call("verify"))  # changed files run for real
    assert info["status"] == "ok" and "Not run again" not in obs, obs
    assert edit_kernel(env, relu, loop)["status"] == "ok"  # the looping files again: known by their content
    obs, reward, terminated, info, seconds = timed_step(env, tool_call("submit"))
    assert seconds < 1.0, seconds
    assert terminated and reward == -1 and info["tier"] == -1, obs
    assert info["compiled"] and not info["correct"] and info["speedup_eager"] is None
    assert info["speedup_compile"] is None and info["integrity"], info
    assert info["result"]["verify"]["status"] == "timeout" and info["result"]["profile"] is None
    assert "Not run again: the same files timed out in verify" in obs and timed_out in obs, obs
    finish_correct_episode(env)


def test_a_slow_kernel_that_finishes_is_not_taken_for_a_hung_one(env: CudaKernelEnv) -> None:
    """Calls far slower than the reference's but inside the hang bound are verified as usual."""
    obs, info, _ = verify_with(env, {"kernels/relu.cpp": SLOW_BUT_FINISHING})
    assert info["status"] == "ok" and "All 1 checks passed" in obs, obs


def test_python_errors_are_observations(env: CudaKernelEnv) -> None:
    for model_new, status, needle in [
        (RAISES, "runtime_error", "ValueError while running ModelNew: boom"),
        (BAD_IMPORT, "load_error", "ModuleNotFoundError while loading"),
    ]:
        obs, info, _ = verify_with(env, {"model_new.py": model_new})
        assert info["status"] == status and needle in obs and "Traceback" in obs, obs
    finish_correct_episode(env)


def test_candidate_runs_under_rlimits(env: CudaKernelEnv) -> None:
    obs, info, _ = verify_with(env, {"model_new.py": LIMITS_PROBE})
    assert info["status"] == "runtime_error"
    assert "'RLIMIT_NOFILE': (1024, 1024)" in obs and "'RLIMIT_CORE': (0, 0)" in obs
    assert f"'RLIMIT_AS': ({MEMORY_CAP}, {MEMORY_CAP})" in obs
    if STATUS.works("pids"):  # counted in the candidate's own user namespace: supervisor, reaper, candidate
        assert f"'RLIMIT_NPROC': ({TASK_ALLOWANCE + 3}, {TASK_ALLOWANCE + 3})" in obs


@pytest.mark.skipif(
    os.getuid() == 0 and not (STATUS.works("user") and STATUS.works("pids") and STATUS.works("pid_max")),
    reason="RLIMIT_NPROC does not bind root and this kernel has no pid_max per PID namespace "
    f"({STATUS.pid_max or STATUS.pids or STATUS.user})",
)
def test_fork_bomb_is_bounded_and_every_process_dies(fault_env: tuple[CudaKernelEnv, Leftovers]) -> None:
    env, record = fault_env
    obs, info, _ = verify_with(env, {"kernels/relu.cpp": FORK_BOMB})
    if not STATUS.works("pids"):  # the children hold the candidate's pipes open until the timeout kills them
        assert info["status"] in ("runtime_error", "timeout"), obs
    else:  # they die with the candidate's PID namespace
        assert info["status"] == "runtime_error", obs
    if info["status"] == "runtime_error":
        assert "fork failed after" in obs and "Resource temporarily unavailable" in obs, obs
        forked = int(obs.split("fork failed after ")[1].split()[0])
        bound = TASK_ALLOWANCE if os.getuid() != 0 else TASK_ALLOWANCE + RESERVED_PIDS + 3  # root: pid_max only
        assert 0 < forked <= bound
    assert record.processes() == []  # the children called setsid: the process group alone misses them
    finish_correct_episode(env)


def test_memory_bomb_stops_at_the_address_space_cap(env: CudaKernelEnv) -> None:
    obs, info, _ = verify_with(env, {"kernels/relu.cpp": MEMORY_BOMB})
    assert info["status"] == "runtime_error" and "MemoryError while running ModelNew" in obs, obs
    finish_correct_episode(env)


def test_a_gigabyte_on_stdout_is_cut_and_counted(env: CudaKernelEnv) -> None:
    obs, info, seconds = verify_with(env, {"kernels/relu.cpp": STDOUT_FLOOD})
    assert info["status"] == "runtime_error" and "RuntimeError while running ModelNew: wrote 1 GiB" in obs, obs
    assert "[the process wrote 1073741824 bytes of output; 1073676288 bytes in the middle were dropped]" in obs
    assert len(obs) < 20_000 and seconds < VERIFY_TIMEOUT
    finish_correct_episode(env)


def test_writes_outside_the_workspace(fault_env: tuple[CudaKernelEnv, Leftovers]) -> None:
    env, record = fault_env
    env.reset(options={"task_id": RELU})
    workspace = env.workspace.path
    targets = {
        "scratch": "$TMPDIR/note.txt",
        "workspace": f"{workspace}/note.txt",
        "home": f"{Path.home()}/cudagym-fault-note-{os.getpid()}.txt",
        "tmp": f"{tempfile.gettempdir()}/cudagym-fault-note-{os.getpid()}.txt",
    }
    writable = exchange_dir()  # evaluation files travel there: it stays writable (/dev/shm, else the temp folder)
    targets = {name: path for name, path in targets.items() if not Path(path).is_relative_to(writable)}
    readonly = STATUS.works("user") and STATUS.works("readonly")
    if readonly:  # never written into the repository where nothing stops it
        targets["harness"] = f"{HARNESS_DIR}/cudagym-fault-note-{os.getpid()}.txt"
    try:
        write_all(env, {**relu_solution(), "kernels/relu.cpp": write_attempts(targets, f"{workspace}/model.py")})
        obs, _, _, _, info = env.step(tool_call("verify"))
        assert info["status"] == "runtime_error", obs
        assert "scratch: written" in obs  # HOME and TMPDIR are the candidate's private scratch folder
        if readonly:
            for name in targets.keys() - {"scratch"}:
                assert f"{name}: Read-only file system" in obs, obs
            if "workspace" in targets:
                assert "delete: Read-only file system" in obs and (workspace / "model.py").is_file()
            assert not any(Path(p).exists() for p in targets.values() if not p.startswith("$"))
        scratches = [d for d in record.directories if Path(d).name.startswith(f"cudagym-child-{os.getpid()}-")]
        assert scratches and not any(Path(d, "note.txt").exists() for d in scratches)  # removed with the process
    finally:
        for path in targets.values():
            if not path.startswith("$"):
                Path(path).unlink(missing_ok=True)
    finish_correct_episode(env)


@pytest.mark.skipif(not STATUS.works("user"), reason=f"no user namespaces here: {STATUS.user}")
def test_the_compiler_cannot_read_the_reference_solutions(env: CudaKernelEnv) -> None:
    """With the static checks off, only the compiler sandbox stands between a kernel and the task's solutions."""
    env.reset(options={"task_id": RELU})
    solution = next(Path(BUILTIN_RELU.solutions["cpu"]).rglob("*.cpp"))
    original = relu_solution()["kernels/relu.cpp"]
    for line in (f'#include "{solution}"', f'asm(".incbin \\"{solution}\\"");'):
        write_all(env, {**relu_solution(), "kernels/relu.cpp": f"{line}\n{original}"})
        obs, _, _, _, info = env.step(tool_call("compile"))
        assert info["status"] == "compile_error", obs
        assert "No such file or directory" in obs or "file not found" in obs, obs
    finish_correct_episode(env)


@pytest.mark.skipif(not STATUS.works("network"), reason=f"no network namespace here: {STATUS.network}")
def test_network_connections_fail_inside_the_sandbox(env: CudaKernelEnv) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        obs, info, _ = verify_with(env, {"kernels/relu.cpp": connect_attempts(port)})
        assert info["status"] == "runtime_error", obs
        assert f"127.0.0.1:{port} Network is unreachable" in obs and "1.1.1.1:53 Network is unreachable" in obs
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing reached the listener on this machine's loopback
    finish_correct_episode(env)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
TOOL_NAMES = st.sampled_from([*TOOLS_BY_NAME, "bash", "Submit", ""])


def _calls() -> st.SearchStrategy[str]:
    """Text that looks like a tool call: JSON objects with any names and arguments, cut, tagged, doubled."""
    call = st.builds(
        lambda name, arguments: {"name": name, "arguments": arguments},
        TOOL_NAMES,
        st.dictionaries(st.sampled_from(["path", "content", "old_string", "ncu", "x", ""]), JSON_VALUES, max_size=3),
    )
    text = call.map(json.dumps)
    return st.one_of(
        st.text(max_size=200),
        text,
        st.tuples(text, st.integers(min_value=0, max_value=60)).map(lambda t: t[0][: t[1]]),
        text.map(lambda t: f"<tool_call>{t}"),
        st.tuples(text, text).map(lambda t: f"<tool_call>{t[0]}</tool_call><tool_call>{t[1]}</tool_call>"),
        st.tuples(text, st.text(max_size=30)).map(lambda t: t[0].replace('"', t[1], 1)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=_calls())
def test_malformed_tool_calls_are_observations(env: CudaKernelEnv, action: str) -> None:
    assume(isinstance(parse_action(action), ParseFailure))
    env.reset(options={"task_id": RELU})
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["status"] == "invalid_call" and reward == 0 and not terminated and not truncated
    assert obs and set(obs) <= set(string.printable) and len(obs) <= env.max_obs_chars


def test_a_correct_episode_after_malformed_calls(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    for action in ("", "{", '{"name": "verify", "arguments": {"now": true}}', "<tool_call>[1, 2]</tool_call>"):
        assert env.step(action)[4]["status"] == "invalid_call"
    finish_correct_episode(env)


# -- without namespaces -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bare_env(fast_config: EvalConfig, cache_dir: Path) -> Iterator[tuple[CudaKernelEnv, Leftovers]]:
    """An env whose candidates get rlimits and scratch folders but no namespace (as where none is allowed)."""
    yield from recorded_env(fast_config, cache_dir, NAMESPACES_OFF, max_turns=100)


def test_without_namespaces_processes_that_leave_the_session_are_killed(
    bare_env: tuple[CudaKernelEnv, Leftovers],
) -> None:
    env, record = bare_env
    obs, info, _ = verify_with(env, {"kernels/relu.cpp": SESSION_LEAVERS})
    assert info["status"] == "runtime_error" and "left 3 processes behind" in obs, obs
    assert record.processes() == []  # found by their sandbox id, not by their process group or parent


DELETES_FIXED_FILES = kernel(
    "#include <cstdio>",
    "void relu_kernel(const float* x, float* y, int64_t n) {",
    '  std::remove("model.py");  // the candidate runs in the workspace',
    '  std::remove("binding.cpp");',
    "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;",
    "}",
)


def test_without_namespaces_deleted_fixed_files_are_found_and_restored(
    bare_env: tuple[CudaKernelEnv, Leftovers],
) -> None:
    env = bare_env[0]
    verify_with(env, {"kernels/relu.cpp": DELETES_FIXED_FILES})
    assert not (env.workspace.path / "model.py").exists()
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "integrity", obs
    assert "Fixed workspace files were modified (" in obs and "they have been restored" in obs
    assert "model.py" in obs and "binding.cpp" in obs
    assert not env.workspace.tampered_fixed()
    finish_correct_episode(env)


BROKEN_INPUTS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    raise MemoryError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes")


def get_init_inputs():
    return []
"""


def test_a_submit_the_harness_cannot_evaluate_ends_the_episode_with_no_reward_and_says_why(
    fast_config: EvalConfig,
) -> None:
    from cudagym.tasks.task import Task

    task = Task(id="test/broken_inputs", name="broken inputs", source=BROKEN_INPUTS)
    env = CudaKernelEnv([task], backend="cpu", eval_config=fast_config)
    try:
        env.reset(options={"task_id": task.id})
        write_all(env, relu_solution())
        obs, reward, terminated, truncated, info = env.step(tool_call("submit"))  # never raises
        assert terminated and not truncated and reward == 0.0
        assert info["status"] == "harness_error" and "can't allocate memory" in info["harness_error"]
        assert "Not evaluated" in obs and "Traceback" not in obs
        assert info["reward_terms"] == {"harness_error": 0.0}
    finally:
        env.close()
