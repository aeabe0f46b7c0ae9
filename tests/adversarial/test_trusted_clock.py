"""Forgeries of the measurement itself, on the CPU backend with every static check off, so that only the trusted
clock (harness/clock.py) and its checks stand in the way.

Two kinds of fixture:

* attacks that change what a timed call returns (skipping work once verification is over or on a share of the
  calls, caching, finishing in the background after saying done, phase detection by call count): each must end at
  tier -1, caught by the full comparison of every timed call or by the freeze that stops the candidate before its
  outputs are read;
* attacks on the candidate process's own view of time (patched ``statistics.median``, timers, the garbage
  collector's phase signal): these cannot change a number that decides the reward any more, so the assertion is
  that the profile reports the honest solution's time, not the forged one.

GPU counterparts (work left on a side stream, early "done") are in tests/gpu/test_gpu_integrity.py.
"""

from __future__ import annotations

import pytest
from cudagym_testing import RELU, assert_caught, relu_solution, with_binding_forward, write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv

HEAD = "import cuda_extension\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
CALL = "cuda_extension.relu_forward(x.contiguous())"


def model_new(body: str, prelude: str = "") -> dict[str, str]:
    files = relu_solution()
    files["model_new.py"] = f"{prelude}{HEAD}{body}"
    return files


def binding(body: str) -> dict[str, str]:
    return with_binding_forward(relu_solution(), body)


# name -> (files, a status or failed check that must be named)
CAUGHT: dict[str, tuple[dict[str, str], str | tuple[str, ...]]] = {
    # torch computes the answer on every call but the first (the one call whose operators are always recorded): the
    # recording of a random eighth of the later calls, or the kernel's samples of where the threads run, see it
    "torch_after_the_first_call": (
        model_new(
            "    def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n"
            "    def forward(self, x):\n        self.calls += 1\n"
            f"        if self.calls == 1:\n            return {CALL}\n"
            '        return getattr(x, "cl" + "amp")(min=0)\n'
        ),
        ("no_torch_compute", "cpu_time_in_own_code"),
    ),
    # phase detection by call count: honest for as many calls as a verification makes (3 checks and the repeat in
    # these tests' configuration), then the last output again
    "honest_then_stale": (
        model_new(
            "    def __init__(self):\n        super().__init__()\n        self.calls, self.last = 0, None\n\n"
            "    def forward(self, x):\n        self.calls += 1\n"
            f"        if self.calls <= 4 or self.last is None:\n            self.last = {CALL}\n"
            "        return self.last\n"
        ),
        "mismatch",
    ),
    # phase detection in C++: no work at all after the first calls of the process (output left unwritten)
    "skip_after_verification": (
        binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  static int calls = 0;
  auto y = torch::empty_like(x);
  if (++calls <= 4) relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}"""
        ),
        ("mismatch", "invalid_output"),
    ),
    # honest for as many calls as a verification makes, then no work on every other call: with a random share of the
    # timed calls compared, a skip pattern like this escaped at times and took its halved time into the median; every
    # timed call is compared, so the median can take no skipped call
    "skips_every_other_timed_call": (
        binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  static int calls = 0;
  auto y = torch::empty_like(x);
  if (++calls <= 4 || calls % 2 == 1) relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}"""
        ),
        ("mismatch", "invalid_output"),
    ),
    # no work on calls drawn at random (three in four after the first two: the few calls these tests make would let
    # a smaller share through by luck; tests/harness/test_stages.py shows that one skipped timed call always fails)
    "skips_random_calls": (
        binding(
            """#include <random>
torch::Tensor relu_forward(torch::Tensor x) {
  static int calls = 0;
  static std::mt19937 draw{std::random_device{}()};
  auto y = torch::empty_like(x);
  if (++calls <= 2 || draw() % 4 == 0) relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}"""
        ),
        ("mismatch", "invalid_output"),
    ),
    # cached by shape: the first output for a shape is returned for every later input of that shape
    "cache_by_shape": (
        binding(
            """#include <map>
#include <vector>
static std::map<std::vector<int64_t>, torch::Tensor> cache;
torch::Tensor relu_forward(torch::Tensor x) {
  auto key = x.sizes().vec();
  auto hit = cache.find(key);
  if (hit != cache.end()) return hit->second;
  auto y = torch::empty_like(x);
  relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  cache.emplace(key, y);
  return y;
}"""
        ),
        "mismatch",
    ),
    # "done" before the work: a detached thread computes the output after forward returned
    "finish_in_the_background": (
        binding(
            """#include <thread>
#include <chrono>
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  int64_t n = x.numel();
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    relu_kernel(in, out, n);
  }).detach();
  return y;
}"""
        ),
        ("mismatch", "invalid_output"),
    ),
    # the output is the input, overwritten in place (no allocation, no second pass over memory)
    "in_place_into_the_input": (
        binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  relu_kernel(x.data_ptr<float>(), x.data_ptr<float>(), x.numel());
  return x;
}"""
        ),
        ("inputs_unchanged", "outputs_do_not_alias_inputs", "mismatch"),
    ),
    # torch computes the answer behind a guard that hides it from the candidate's own operator recording: only the
    # kernel's samples of where the threads run (taken from outside) see it
    "aten_behind_a_dispatch_guard": (
        binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  c10::impl::ExcludeDispatchKeyGuard hidden(c10::DispatchKey::Python);
  c10::impl::ExcludeDispatchKeyGuard hidden_too(c10::DispatchKey::PythonTLSSnapshot);
  return at::relu(x);
}"""
        ),
        "cpu_time_in_own_code",
    ),
    # the harness's modules by their bare names, as when the children ran them from the harness folder: that folder
    # and the working directory are off the candidate's sys.path (``common.launch_arguments``)
    "imports_the_harness": (
        model_new(f"    def forward(self, x):\n        return {CALL}\n", "import timing\n"),
        "load_error",
    ),
    "imports_the_handshake": (
        model_new(f"    def forward(self, x):\n        return {CALL}\n", "import handshake\n"),
        "load_error",
    ),
}

# name -> model_new.py prelude that tampers with the candidate process's own sense of time and phase
FORGERIES: dict[str, str] = {
    # the bmm attack of the issue: every median in this process divided by 1000
    "patched_median": "import statistics\n_m = [statistics][0]\n_r = _m.median\n_m.median = lambda v: _r(v) / 1000.0\n",
    # every timer of this process slowed down 1000 times
    "patched_timers": (
        "import time\n_t = [time][0]\n_p, _c = _t.perf_counter, _t.perf_counter_ns\n"
        "_t.perf_counter = lambda: _p() / 1000.0\n_t.perf_counter_ns = lambda: _c() // 1000\n"
    ),
    # work only when the garbage collector is on (the old timing loop switched it off)
    "gc_phase_signal": ("import gc\n_g = [gc][0]\n_real = _g.disable\n_g.disable = lambda: None\n"),
    # the harness's timing module by the name the library imports it by (the same module the candidate process
    # runs), every summary it makes divided by 1000: the figures are the reference's, not this module's
    "patched_harness_timing": (
        "import cudagym.harness.timing as _t\n_s = _t.summarize\n"
        "_t.summarize = lambda times, *a, **k: _s([t / 1000.0 for t in times], *a, **k)\n"
    ),
}


@pytest.mark.parametrize("attack", list(CAUGHT))
def test_an_attack_on_the_timed_calls_gets_minus_one_and_is_named(env: CudaKernelEnv, attack: str) -> None:
    files, expected = CAUGHT[attack]
    assert_caught(env, files, expected)


@pytest.fixture(scope="module")
def honest_ms(env: CudaKernelEnv) -> float:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    result = info["result"]
    # the honest kernel passes the full comparison of every timed call
    assert result["checked_calls"] >= result["repetitions"] * result["calls_per_handshake"] > 0, result
    return result["candidate_ms"]


# the work split over eight threads while the thread that answers waits: each thread runs an eighth, so a clock that
# charged the busiest thread alone would read a quarter of what two cores take; the floor (all threads' run time over
# the two threads a candidate may use, harness/cputime.py) charges it as two cores in perfect parallel
SPREAD_OVER_THREADS = """#include <algorithm>
#include <thread>
#include <vector>
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  int64_t n = x.numel(), parts = 8, step = (n + parts - 1) / parts;
  std::vector<std::thread> pool;
  for (int64_t p = 0; p < parts; ++p) {
    int64_t lo = p * step, hi = std::min(n, lo + step);
    if (lo < hi) pool.emplace_back([=] { for (int64_t i = lo; i < hi; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f; });
  }
  for (auto& t : pool) t.join();
  return y;
}"""


def test_work_spread_over_more_threads_than_allowed_is_charged_as_the_allowed_ones(
    env: CudaKernelEnv, honest_ms: float
) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, binding(SPREAD_OVER_THREADS))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    assert info["result"]["candidate_ms"] > honest_ms / 2, (info["result"]["candidate_ms"], honest_ms)


# the work done in a child process that ends before the candidate is frozen again: its run time is in no clock left
# to read, so the handshake is charged its interval (harness/cputime.py). The child works for CHILD_MS of wall time on
# every call (through a volatile pointer, which the compiler may not fold), while the parent only waits: a clock that
# missed the child would read the parent's fork and copy, a few ms; one that charges the interval reads at least
# CHILD_MS, however busy the host (load only lengthens the interval)
CHILD_MS = 50
IN_A_PROCESS_THAT_ENDS = """#include <cstring>
#include <ctime>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
static double ms_since(const timespec& start) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start.tv_sec) * 1e3 + (now.tv_nsec - start.tv_nsec) / 1e6;
}
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  size_t bytes = n * sizeof(float);
  auto* shared = static_cast<float*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  const float* in = x.data_ptr<float>();
  pid_t child = fork();
  if (child == 0) {
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile float* out = shared;
    do {
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    } while (ms_since(start) < CHILD_MS);
    _exit(0);
  }
  waitpid(child, nullptr, 0);
  std::memcpy(y.data_ptr<float>(), shared, bytes);
  munmap(shared, bytes);
  return y;
}""".replace("CHILD_MS", str(CHILD_MS))


def test_work_in_a_process_that_ends_within_the_call_is_charged(env: CudaKernelEnv, honest_ms: float) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, binding(IN_A_PROCESS_THAT_ENDS))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    charged = info["result"]["candidate_ms"]
    assert charged >= 0.9 * CHILD_MS and charged > honest_ms, (charged, honest_ms)


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_tampering_with_the_candidates_own_clock_changes_no_figure(
    env: CudaKernelEnv, honest_ms: float, forgery: str
) -> None:
    env.reset(options={"task_id": RELU})
    files = model_new(f"    def forward(self, x):\n        return {CALL}\n", FORGERIES[forgery])
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("profile"))
    result = info["result"]
    failed = {f["check"] for f in result["integrity"] if not f["passed"]}
    if info["status"] == "integrity":  # the tripwire on replaced timers saw it: refused outright
        assert failed == {"harness_functions_untouched"}, obs
        return
    assert info["status"] == "ok", obs
    # a forged clock would report a thousandth of the time; the trusted one reports what the calls took (the
    # bound is loose: two honest profiles on a busy 2-core machine can differ several times over)
    assert result["candidate_ms"] > honest_ms / 20, (result["candidate_ms"], honest_ms)
    assert result["method"].startswith("trusted clock"), result["method"]
