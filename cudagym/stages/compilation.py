"""The compile stage: the gate (fixed files restored, static integrity checks), then the workspace layout built by the
trusted builder, or a single-file ``model_new.py`` imported in a candidate process while the trusted side builds
each of its ``load_inline`` calls (``cudagym.inline_build``). Its result: ``CompileResult``."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cudagym.candidate_messages import Step, parse
from cudagym.candidate_pool import candidate_output, classify
from cudagym.compile_gate import gated_build
from cudagym.harness.protocol import CandidateJob
from cudagym.results import CompileResult, Stage, Status
from cudagym.sandbox import Child
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator


def compile_workspace(ev: LocalEvaluator, workspace: Workspace) -> CompileResult:
    """Builds kernels/ into cuda_extension; a single-file model_new.py (load_inline) is imported instead."""
    ev.pool.fill()  # torch imports while the compiler runs

    def build() -> CompileResult:
        return compile_single_file(ev, workspace) if is_single_file(workspace) else ev.builder.build(workspace)

    return gated_build(workspace, ev.policy, build)


def compile_single_file(ev: LocalEvaluator, workspace: Workspace) -> CompileResult:
    """Imports model_new.py in a candidate process; each of its load_inline/load calls is built by the trusted
    builder as it comes (``cudagym.inline_build``), and the later stages are given those builds (by request key)."""
    start = time.monotonic()
    digest = single_file_digest(workspace, ev.backend.arch)
    if digest in ev._inline_builds:
        return CompileResult(
            stage=Stage.COMPILE,
            status=Status.OK,
            cached=True,
            build_hash=digest,
            message="model_new.py is unchanged since it last built (cached).",
        )
    timeout = ev.config.build.timeout_seconds
    child = ev.pool.start(CandidateJob(mode="import", workspace=str(workspace.path)))
    builds, built = serve_inline_builds(ev, child, workspace, start + timeout)
    failed = next((result for result in built if not result.ok), None)
    if failed is not None:
        ev.pool.discard(child)
        return dataclasses.replace(failed, seconds=time.monotonic() - start)
    finished, code = ev.pool.finish(child, start + timeout)
    status, message, _sig = classify(child, finished, code, timeout)
    diagnostics = candidate_output(child, workspace, ev.config.output_chars)
    if status is not Status.OK:
        return CompileResult(
            stage=Stage.COMPILE,
            status=Status.COMPILE_ERROR,
            seconds=time.monotonic() - start,
            message=f"Importing the single-file model_new.py failed: {message}",
            diagnostics=diagnostics,
        )
    ev._inline_builds[digest] = builds
    names = ", ".join(Path(result.artifact or "").stem for result in built)
    return CompileResult(
        stage=Stage.COMPILE,
        status=Status.OK,
        seconds=time.monotonic() - start,
        message=f"Imported the single-file model_new.py (built: {names or 'no load_inline call'}).",
        diagnostics="\n".join(filter(None, [*(r.diagnostics for r in built), diagnostics])),
        build_hash=digest,
        cached=bool(built) and all(result.cached for result in built),
        objects_compiled=sum(result.objects_compiled for result in built),
        objects_reused=sum(result.objects_reused for result in built),
        commands=tuple(command for result in built for command in result.commands),
        kernels=tuple(kernel for result in built for kernel in result.kernels),
    )


def serve_inline_builds(
    ev: LocalEvaluator, child: Child, workspace: Workspace, deadline: float
) -> tuple[dict[str, str], list[CompileResult]]:
    """Builds what the importing candidate asks for (``stage: build``) and answers it, until it is done, fails
    or a build fails; returns (request key -> library, every build's result in order)."""
    builds: dict[str, str] = {}
    built: list[CompileResult] = []
    while True:
        raw = child.receive(deadline)
        if raw is None:
            return builds, built
        message = parse(raw)
        if message.failed or message.step is Step.DONE:
            return builds, built
        if message.step is not Step.BUILD:
            continue
        key, result = ev.inline_builder.build(message.request, workspace)
        built.append(result)
        if not result.ok:
            return builds, built
        builds[key] = str(result.artifact)
        child.send({"artifact": result.artifact})


def is_single_file(workspace: Workspace) -> bool:
    """A KernelBench-style solution: no kernel sources, everything (load_inline) inside model_new.py."""
    return not workspace.kernel_sources() and (workspace.path / "model_new.py").is_file()


def single_file_digest(workspace: Workspace, arch: str) -> str:
    """What a single-file solution's build depends on: model_new.py, the workspace's other files (``load`` may read
    them) and the device's architecture."""
    files = sorted(workspace.writable_files())
    return hashlib.sha256(
        b"\0".join([arch.encode(), *(f"{p.relative_to(workspace.path)}".encode() + p.read_bytes() for p in files)])
    ).hexdigest()[:16]
