"""Step latency: one compile-verify-profile cycle, the naive way and cudagym's way, side by side.

    python benchmarks/step_latency.py --backend cuda --task builtin/scale_bias_tanh --cycles 3 --json latency.json
    python benchmarks/step_latency.py --backend cuda --variants cudagym --pch-ready --cold-runs 3 --fresh-torch-caches

Variants, each on the task's reference solution in CUDA Agent's layout (kernels/*.cu|*.cpp, binding files
registered through binding_registry.h, model_new.py):

* **naive**: the pipeline of CUDA Agent's released scripts, reimplemented here: three fresh processes
  per cycle. ``compile`` wipes the build directory and builds the extension with
  ``torch.utils.cpp_extension.load`` (-O3, fast math); ``verify`` imports torch, builds Model and
  ModelNew, copies the weights and compares five fresh input sets (atol = rtol = 1e-2, with
  ``torch.nn.functional`` blocked during ModelNew's forward); ``profile`` times ModelNew, eager and
  ``torch.compile`` (5 warm-up and 10 timed iterations; CUDA: profiler device time; CPU: wall clock).
* **cudagym cold**: the first cycle of a ``LocalEvaluator`` with an empty cache directory (precompiled
  header, objects, reference process, baselines all made then). torch.compile's own on-disk caches are
  the machine's and are not emptied, unless ``--fresh-torch-caches`` gives the evaluator's processes a new
  HOME and TMPDIR (empty inductor, Triton and ccache caches). ``--cold-runs N``: N such first cycles, each by
  a new evaluator on a new empty cache, reported as their median (the warm cycles follow the last). With
  ``--cache-dir`` the first cycle uses that cache instead and is reported as "cudagym first" (not cold).
  ``--pch-ready`` builds the precompiled header of the binding headers (once per toolchain) into that cache
  first and reports its time apart; ``--bytecode-ready`` fills the children's bytecode cache (once per Python
  installation, ``cudagym/bytecode.py``) likewise. ``--bytecode-cache on,off`` compares that cache's settings:
  they take turns over the cold runs, each reported as a variant of its own.
* **cudagym warm**: the following cycles of the same evaluator, one kernel source edited before each
  (a comment with the cycle number, which changes its hash), as an agent iterating on a kernel does.

``--think S`` waits S seconds before each cudagym cycle, as an agent writing its next kernel does; the wait
is not counted. Each cycle's seconds are compile + verify + profile; the table shows medians per variant, the ratio
naive / cudagym warm and the cold first cycle. The naive stages run as ``--stage`` subprocesses of this
script that import only torch, never cudagym.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NAIVE_CHECKS = 5
NAIVE_WARMUP, NAIVE_ITERS = 5, 10
STAGES = ("compile", "verify", "profile")


# -- the naive pipeline (runs in fresh processes; torch only) ---------------------------------------


def _naive_compile(workdir: Path, device: str) -> dict[str, Any]:
    """CUDA Agent's compile: a wiped build directory, cpp_extension.load, the .so copied next to model_new.py."""
    import torch.utils.cpp_extension as cpp_ext

    build = workdir / "build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    (workdir / "cuda_extension.so").unlink(missing_ok=True)
    kernels = workdir / "kernels"
    sources = [workdir / "binding.cpp", *sorted(kernels.glob("*.cu")), *sorted(kernels.glob("*.cpp"))]
    cuda = device == "cuda"
    cpp_ext.load(
        name="cuda_extension",
        sources=[str(s) for s in sources],
        build_directory=str(build),
        extra_include_paths=[str(workdir)],
        extra_cflags=["-O3"] if cuda else ["-O3", "-march=native", "-fopenmp"],
        extra_cuda_cflags=["-O3", "--use_fast_math"],
        extra_ldflags=[] if cuda else ["-fopenmp"],
        with_cuda=cuda,
        verbose=False,
    )
    shutil.copy2(build / "cuda_extension.so", workdir / "cuda_extension.so")
    return {"sources": len(sources)}


def _naive_models(workdir: Path, device: str) -> tuple[Any, Any, Any]:
    """(Model, ModelNew with Model's weights, the model module) as the naive scripts build them."""
    import importlib

    sys.path.insert(0, str(workdir))
    os.chdir(workdir)
    reference = importlib.import_module("model")
    model_new = importlib.import_module("model_new")
    init = reference.get_init_inputs()
    init = list(init) if isinstance(init, (list, tuple)) else [init]
    model = reference.Model(*init).eval().to(device)
    candidate = model_new.ModelNew(*init).eval().to(device)
    candidate.load_state_dict(model.state_dict())
    return model, candidate, reference


def _inputs(reference: Any, device: str) -> tuple[list[Any], list[Any]]:
    import torch

    inputs = reference.get_inputs()
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    moved = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    return moved, [x.clone() if isinstance(x, torch.Tensor) else x for x in moved]


def _naive_verify(workdir: Path, device: str) -> dict[str, Any]:
    """CUDA Agent's verification: five fresh input sets, exact types, assert_close at 1e-2, F blocked."""
    import torch
    import torch.nn.functional as F

    model, candidate, reference = _naive_models(workdir, device)

    def check(actual: Any, expected: Any) -> None:
        if type(actual) is not type(expected):
            raise AssertionError(f"{type(actual)} != {type(expected)}")
        if isinstance(expected, (list, tuple)):
            for a, e in zip(actual, expected, strict=True):
                check(a, e)
        elif isinstance(expected, torch.Tensor):
            torch.testing.assert_close(actual, expected, atol=1e-2, rtol=1e-2)
        elif actual != expected:
            raise AssertionError(f"{actual!r} != {expected!r}")

    def blocked(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"torch.nn.functional.{name} is not allowed in ModelNew")

        return refuse

    originals = {n: getattr(F, n) for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))}
    with torch.no_grad():
        for _ in range(NAIVE_CHECKS):
            inputs, clones = _inputs(reference, device)
            expected = model(*inputs)
            for name in originals:
                setattr(F, name, blocked(name))
            try:
                actual = candidate(*clones)
            finally:
                for name, fn in originals.items():
                    setattr(F, name, fn)
            check(actual, expected)
    if device == "cuda":
        torch.cuda.synchronize()
    return {"checks": NAIVE_CHECKS}


def _naive_profile(workdir: Path, device: str) -> dict[str, Any]:
    """CUDA Agent's profiling: ModelNew, eager and torch.compile, 5 warm-up + 10 timed iterations each."""
    import torch

    model, candidate, reference = _naive_models(workdir, device)
    inputs, clones = _inputs(reference, device)
    compiled = torch.compile(model)

    def bench(fn: Any, args: list[Any]) -> float:
        with torch.no_grad():
            for _ in range(NAIVE_WARMUP):
                fn(*args)
            if device != "cuda":
                start = time.perf_counter()
                for _ in range(NAIVE_ITERS):
                    fn(*args)
                return (time.perf_counter() - start) * 1e3 / NAIVE_ITERS
            activity = torch.profiler.ProfilerActivity.CUDA
            with torch.profiler.profile(activities=[activity]) as prof:
                torch.cuda.synchronize()
                for _ in range(NAIVE_ITERS):
                    fn(*args)
                torch.cuda.synchronize()
            events = [e for e in prof.events() if e.device_type.name == "CUDA"]
            return sum(e.device_time for e in events) / 1e3 / NAIVE_ITERS

    return {
        "candidate_ms": bench(candidate, clones),
        "eager_ms": bench(model, inputs),
        "compile_ms": bench(compiled, inputs),
    }


def _run_stage(stage: str, workdir: Path, device: str) -> None:
    """Entry of a naive stage's process: runs it and prints one JSON line with the outcome."""
    stages = {"compile": _naive_compile, "verify": _naive_verify, "profile": _naive_profile}
    print(json.dumps({"ok": True, **stages[stage](workdir, device)}), flush=True)


def naive_cycle(workdir: Path, backend: Any, timeout: float) -> dict[str, Any]:
    """One naive cycle: each stage a fresh ``python step_latency.py --stage ...`` process."""
    env = dict(os.environ)
    if backend.is_cuda and backend.arch.startswith("sm_"):
        digits = backend.arch[3:]
        env["TORCH_CUDA_ARCH_LIST"] = f"{digits[:-1]}.{digits[-1]}"
    row: dict[str, Any] = {"ok": True}
    for stage in STAGES:
        command = [sys.executable, __file__, "--stage", stage, "--workdir", str(workdir), "--device", backend.device]
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        row[f"{stage}_s"] = time.perf_counter() - start
        if proc.returncode != 0:
            row.update(ok=False, error=f"{stage} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
            break
        row[stage] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


# -- cudagym ----------------------------------------------------------------------------------------


def cudagym_cycle(evaluator: Any, workspace: Any) -> dict[str, Any]:
    """compile, verify and profile through the evaluator, each timed; ok when all three succeeded."""
    row: dict[str, Any] = {}
    results = []
    for stage in STAGES:
        start = time.perf_counter()
        result = getattr(evaluator, stage)(workspace)
        row[f"{stage}_s"] = time.perf_counter() - start
        results.append(result)
    row["ok"] = all(r.ok for r in results)
    row["status"] = [r.status.value for r in results]
    # where the seconds of verify and profile went (what a cold cycle waited for)
    phases = {stage: list(getattr(r, "phases", ())) for stage, r in zip(STAGES, results, strict=True)}
    row["phases"] = {stage: items for stage, items in phases.items() if items}
    if not row["ok"]:
        row["error"] = next(r.message for r in results if not r.ok)
    profile = results[-1]
    row["profile"] = {
        "candidate_ms": profile.candidate_ms,
        "eager_ms": profile.eager_ms,
        "compile_ms": profile.compile_ms,
    }
    return row


def cudagym_cycles(
    task: Any,
    backend: Any,
    config: Any,
    cache_dir: Path,
    scratch: Path,
    files: dict[str, str],
    kernel: str,
    run_id: str,
    warm: int,
    first: str,
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """A new evaluator on ``cache_dir``: its first cycle (reported as ``first``), then ``warm`` cycles with ``kernel``
    edited before each."""
    from cudagym.baselines.scripted import code_edit
    from cudagym.evaluator import LocalEvaluator
    from cudagym.workspace import Workspace

    evaluator = LocalEvaluator(task, backend, config, cache_dir=cache_dir)
    workspace = Workspace(task.source_for(backend.name), "step latency benchmark", root_dir=scratch)
    try:
        for path, content in files.items():
            workspace.write(path, content)
        time.sleep(args.think)
        rows = [cudagym_cycle(evaluator, workspace)]
        _echo(first, rows[0])
        # the preparation's timeline (seconds from its start, about when the cycle began), which the first
        # cycle's waits for the reference's torch.compile and the baselines are read against
        rows[0]["ahead_marks"] = dict(evaluator.ahead_marks)
        marks = ", ".join(f"{step} {at:.2f}" for step, at in evaluator.ahead_marks.items())
        print(f"    preparation ahead done at (s): {marks or 'nothing prepared'}", flush=True)
        for i in range(warm):
            time.sleep(args.think)
            workspace.write(kernel, files[kernel] + code_edit(f"{run_id}_{i + 1}"))
            rows.append(cudagym_cycle(evaluator, workspace))
            _echo("cudagym warm", rows[-1])
    finally:
        evaluator.close()
        workspace.remove()
    return rows


@contextlib.contextmanager
def _children_home(home: Path | None) -> Iterator[None]:
    """HOME and TMPDIR of the processes started meanwhile pointed at ``home`` (made empty), so that the reference
    process finds empty inductor and Triton caches (``/$TMPDIR/torchinductor_$USER``, ``~/.triton``) and the
    builds an empty ccache; None: unchanged. Candidates get a scratch HOME of their own either way."""
    if home is None:
        yield
        return
    home.mkdir(parents=True)
    saved = {name: os.environ.get(name) for name in ("HOME", "TMPDIR")}
    os.environ.update(HOME=str(home), TMPDIR=str(home))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def edited_kernel(files: dict[str, str]) -> str:
    """The kernel source the cycles edit: the first kernels/*.cu or *.cpp that is not a binding file."""
    kernels = [p for p in files if p.startswith("kernels/") and p.endswith((".cu", ".cpp"))]
    plain = [p for p in kernels if not p.endswith("_binding.cpp")]
    return (plain or kernels)[0]


def bytecode_state(used: bool, filled: bool) -> str:
    """What a cold run's bytecode cache was, in words for the table."""
    if not used:
        return "off (the installation's own bytecode, if any)"
    return "filled beforehand" if filled else "on, empty at the start"


def _cycle_s(row: dict[str, Any]) -> float:
    return sum(row.get(f"{s}_s", 0.0) for s in STAGES)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per stage and per cycle of a variant's cycles."""
    summary: dict[str, Any] = {"cycles": len(rows), "ok": all(r["ok"] for r in rows)}
    for stage in STAGES:
        summary[f"{stage}_s"] = statistics.median(r.get(f"{stage}_s", 0.0) for r in rows)
    cycles = [_cycle_s(r) for r in rows]
    summary.update(cycle_s=statistics.median(cycles), min_s=min(cycles), max_s=max(cycles))
    return summary


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cudagym import bytecode
    from cudagym.backends import resolve_backend
    from cudagym.baselines.scripted import code_edit, solution_files
    from cudagym.build import Builder
    from cudagym.eval_config import resolve_bytecode
    from cudagym.evaluator import EvalConfig
    from cudagym.tasks import load
    from cudagym.tuning import Tuning
    from cudagym.workspace import TEMPLATES

    backend = resolve_backend(args.backend)
    task = load("builtin").get(args.task)
    files = solution_files(task, backend.name)
    kernel = edited_kernel(files)
    run_id = secrets.token_hex(4)  # in every edit, so that no cycle reuses objects of an earlier run
    variants: dict[str, list[dict[str, Any]]] = {}
    pch_s: float | None = None
    bytecode_s: float | None = None
    bytecode_states: dict[str, str] = {}
    scratch = Path(tempfile.mkdtemp(prefix="cudagym-latency-"))
    try:
        if "cudagym" in args.variants:
            first = "cudagym first" if args.cache_dir else "cudagym cold"
            tuning = Tuning(
                prestart="auto" if args.prestart is None else args.prestart,
                fork_server=args.fork_server != "off",
                prepare_ahead="auto" if args.prepare_ahead == "auto" else args.prepare_ahead == "on",
                preload_compiler="auto" if args.preload_compiler == "auto" else args.preload_compiler == "on",
            )
            config = EvalConfig(tuning=tuning)
            pch_template = scratch / "pch-template"  # built once, copied into each cold run's empty cache
            if args.pch_ready:
                start = time.perf_counter()
                pch = Builder(backend, cache_dir=args.cache_dir or pch_template, options=config.build)
                built = pch.precompiled_header()
                pch_s = time.perf_counter() - start
                print(f"[precompiled header built beforehand] {pch_s:.2f} s ({built})", flush=True)
            if args.bytecode_ready:
                folder = bytecode.folder(Path(args.cache_dir) if args.cache_dir else pch_template)
                start = time.perf_counter()
                bytecode.build(folder)  # as cudagym prepare fills it
                bytecode_s = time.perf_counter() - start
                print(f"[bytecode cache filled beforehand] {bytecode_s:.2f} s", flush=True)
            runs = 1 if args.cache_dir else args.cold_runs
            settings = args.bytecode_cache
            variants["cudagym warm"] = []
            for run_index in range(runs):
                # the settings take turns, the first of them last (the warm cycles follow the last cold run)
                setting = settings[(runs - 1 - run_index) % len(settings)]
                run_config = dataclasses.replace(
                    config, tuning=dataclasses.replace(tuning, bytecode_cache=bytecode.SETTINGS[setting])
                )
                label = f"{first} (bytecode {setting})" if len(settings) > 1 else first
                cache_dir = Path(args.cache_dir) if args.cache_dir else scratch / f"cache-{run_index}"
                if (pch_template / "pch").is_dir() and not args.cache_dir:
                    shutil.copytree(pch_template / "pch", cache_dir / "pch")
                uses_bytecode = resolve_bytecode(run_config, cache_dir) is not None
                if uses_bytecode and bytecode_s is not None and not args.cache_dir:
                    shutil.copytree(bytecode.folder(pch_template), bytecode.folder(cache_dir))
                home = scratch / f"home-{run_index}" if args.fresh_torch_caches else None
                with _children_home(home):
                    warm = args.cycles if run_index == runs - 1 else 0  # the warm cycles follow the last cold one
                    rows = cudagym_cycles(
                        task, backend, run_config, cache_dir, scratch, files, kernel, run_id, warm, label, args
                    )
                rows[0]["bytecode_cache"] = uses_bytecode
                bytecode_states[label] = bytecode_state(uses_bytecode, bytecode_s is not None)
                variants.setdefault(label, []).append(rows[0])
                variants["cudagym warm"].extend(rows[1:])
        if "naive" in args.variants:
            workdir = scratch / "naive"
            (workdir / "kernels").mkdir(parents=True)
            (workdir / "model.py").write_text(task.source_for(backend.name))
            for name in ("binding.cpp", "binding_registry.h"):
                shutil.copy2(TEMPLATES / name, workdir / name)
            for path, content in files.items():
                (workdir / path).write_text(content)
            variants["naive"] = []
            for i in range(args.naive_cycles or args.cycles):
                (workdir / kernel).write_text(files[kernel] + code_edit(f"{run_id}_{i + 1}"))
                variants["naive"].append(naive_cycle(workdir, backend, args.stage_timeout))
                _echo("naive", variants["naive"][-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {name: summarize(rows) for name, rows in variants.items() if rows}
    report: dict[str, Any] = {
        "benchmark": "step_latency",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "backend": backend.name,
        "device": backend.device_name,
        "task": task.id,
        "edited": kernel,
        "think_s": args.think,
        "pch_built_beforehand_s": pch_s,
        "bytecode_filled_beforehand_s": bytecode_s,
        "bytecode": bytecode_states,
        "summary": summary,
        "cycles": variants,
    }
    if "naive" in summary and "cudagym warm" in summary:
        report["naive_over_warm"] = summary["naive"]["cycle_s"] / summary["cudagym warm"]["cycle_s"]
    if "cudagym cold" in summary:
        report["cold_first_cycle_s"] = summary["cudagym cold"]["cycle_s"]
    cold = {name: s["cycle_s"] for name, s in summary.items() if name.startswith("cudagym cold")}
    if cold:
        report["cold_first_cycles_s"] = cold
    return report


def _echo(variant: str, row: dict[str, Any]) -> None:
    stages = " + ".join(f"{s} {row.get(f'{s}_s', 0.0):.2f}" for s in STAGES)
    extra = "" if row["ok"] else f"  FAILED: {row.get('error', '')[:300]}"
    print(f"[{variant}] {stages} = {_cycle_s(row):.2f} s{extra}", flush=True)
    for stage, phases in row.get("phases", {}).items():
        print(f"    {stage} phases: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases), flush=True)


def print_table(report: dict[str, Any]) -> None:
    print(f"\nStep latency: {report['task']} on {report['backend']} ({report['device']}), {report['date']}")
    print(f"Edited between cycles: {report['edited']}; {report['think_s']:g} s between cycles, not counted")
    if report.get("pch_built_beforehand_s") is not None:
        print(f"Precompiled header built before the cold cycle: {report['pch_built_beforehand_s']:.2f} s")
    if report.get("bytecode_filled_beforehand_s") is not None:
        print(f"Bytecode cache filled before the cold cycle: {report['bytecode_filled_beforehand_s']:.2f} s")
    print()
    print("| variant | cycles | compile s | verify s | profile s | cycle s (median) | min-max s | all ok |")
    print("|---|---|---|---|---|---|---|---|")
    labels = {
        "naive": "naive (CUDA Agent's scripts)",
        "cudagym cold": "cudagym cold (empty cache)",
        "cudagym first": "cudagym first cycle (given cache)",
        "cudagym warm": "cudagym warm (one kernel edited)",
    }
    if report.get("pch_built_beforehand_s") is not None:
        labels["cudagym cold"] = "cudagym cold (empty cache but the precompiled header)"
    for name, state in report.get("bytecode", {}).items():  # what each cold variant's bytecode cache held
        labels[name] = f"{labels['cudagym cold']}; bytecode cache {state}"
    for name in ("naive", *(n for n in labels if n.startswith("cudagym cold")), "cudagym first", "cudagym warm"):
        s = report["summary"].get(name)
        if s is not None:
            print(
                f"| {labels[name]} | {s['cycles']} | {s['compile_s']:.2f} | {s['verify_s']:.2f} | "
                f"{s['profile_s']:.2f} | {s['cycle_s']:.2f} | {s['min_s']:.2f}-{s['max_s']:.2f} | {s['ok']} |"
            )
    print()
    if "naive_over_warm" in report:
        print(f"naive / cudagym warm: {report['naive_over_warm']:.1f}x (issue 6 target on an H200: >= 10x)")
    if "cudagym warm" in report["summary"]:
        warm = report["summary"]["cudagym warm"]["cycle_s"]
        print(f"cudagym warm cycle (median): {warm:.2f} s (target on an H200: <= 2.5 s)")
    for name, seconds in report.get("cold_first_cycles_s", {}).items():
        print(f"{name} first cycle (median): {seconds:.2f} s (target on an H200: <= 15 s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--task", default="builtin/scale_bias_tanh", help="a built-in task with a solution")
    parser.add_argument("--cycles", type=int, default=3, help="naive cycles and cudagym warm cycles (default 3)")
    parser.add_argument("--naive-cycles", type=int, default=0, help="naive cycles (default: --cycles)")
    parser.add_argument("--variants", default="cudagym,naive", help="comma list of cudagym,naive (default both)")
    parser.add_argument(
        "--cache-dir", help="cudagym's cache (default: a new empty one, so that the first cycle is cold)"
    )
    parser.add_argument("--stage-timeout", type=float, default=900.0, help="seconds per naive stage process")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # a naive stage's own process
    parser.add_argument("--prestart", type=int, help="candidate processes kept started ahead (Tuning.prestart)")
    parser.add_argument(
        "--fork-server", default="auto", choices=("auto", "on", "off"), help="Tuning.fork_server (auto: on)"
    )
    parser.add_argument("--prepare-ahead", default="auto", choices=("auto", "on", "off"), help="Tuning.prepare_ahead")
    parser.add_argument(
        "--preload-compiler",
        default="auto",
        choices=("auto", "on", "off"),
        help="Tuning.preload_compiler (auto: on when preparing ahead)",
    )
    parser.add_argument(
        "--cold-runs",
        type=int,
        default=1,
        help="cold first cycles, each by a new evaluator on an empty cache, reported as their median (default 1; "
        "one with --cache-dir)",
    )
    parser.add_argument(
        "--fresh-torch-caches",
        action="store_true",
        help="give each cold run's processes a new HOME and TMPDIR: empty inductor, Triton and ccache caches "
        "(packages installed with pip --user are then not found by them)",
    )
    parser.add_argument(
        "--pch-ready",
        action="store_true",
        help="build the precompiled header (once per toolchain) into the empty cache before the cold cycle",
    )
    parser.add_argument(
        "--bytecode-cache",
        default="auto",
        help="Tuning.bytecode_cache for the cold runs: auto, on or off, or a comma list (on,off), whose "
        "settings then take turns over the --cold-runs and are reported apart (default auto)",
    )
    parser.add_argument(
        "--bytecode-ready",
        action="store_true",
        help="fill the bytecode cache (cudagym/bytecode.py, once per Python installation) before the cold cycles, "
        "as the precompiled header with --pch-ready; runs whose setting leaves the cache off do not use it",
    )
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="seconds between cudagym cycles, not counted (an agent writing its next kernel; default 0)",
    )
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        _run_stage(args.stage, Path(args.workdir), args.device)
        return 0
    if args.cycles < 1:
        parser.error("--cycles must be >= 1")
    args.bytecode_cache = [v.strip() for v in args.bytecode_cache.split(",") if v.strip()]
    from cudagym.bytecode import SETTINGS

    if not args.bytecode_cache or not set(args.bytecode_cache) <= set(SETTINGS):
        parser.error("--bytecode-cache takes auto, on, off or a comma list of them")
    args.variants = {v.strip() for v in args.variants.split(",") if v.strip()}
    if not args.variants or not args.variants <= {"cudagym", "naive"}:
        parser.error("--variants takes cudagym, naive or both")
    report = run(args)
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if all(s["ok"] for s in report["summary"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
