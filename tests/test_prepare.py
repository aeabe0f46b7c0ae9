"""``cudagym prepare`` (cudagym/prepare.py): each part is made once, then reported as present."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym import bytecode
from cudagym.backends import resolve_backend
from cudagym.build import Builder
from cudagym.cli import main
from cudagym.eval_config import EvalConfig
from cudagym.inline_build import InlineBuilder, typical_requests
from cudagym.prepare import prepare
from cudagym.tasks import load
from cudagym.tuning import Tuning
from cudagym.workspace import Workspace


def test_the_header_is_built_once_the_cpu_backend_needs_no_gpu_library_and_the_usual_single_file_uses_it(
    cache_dir: Path, tmp_path: Path
) -> None:
    """One test, not two: the headers take minutes to build on CI's cores, and two tests could land on two workers."""
    cpu = resolve_backend("cpu")
    parts = {
        p.part: p for p in prepare(cpu, cache_dir=cache_dir, config=EvalConfig(tuning=Tuning(bytecode_cache=False)))
    }
    assert parts["precompiled header"].status in ("built", "present")  # other tests may have built it first
    assert Path(parts["precompiled header"].path).with_suffix(".h.gch").is_file()
    assert parts["GPU library"].status == "skipped"
    assert parts["bytecode cache"].status == "skipped" and "turned off" in parts["bytecode cache"].detail
    single = parts["single-file headers"]
    assert single.status in ("built", "present") and Path(single.path).with_suffix(".h.gch").is_file(), single
    again = {
        p.part: p for p in prepare(cpu, cache_dir=cache_dir, config=EvalConfig(tuning=Tuning(bytecode_cache=False)))
    }
    assert again["precompiled header"].status == "present" and again["single-file headers"].status == "present"
    # a prepared machine compiles the usual single-file request against its header
    workspace = Workspace(load("builtin").get("builtin/relu").source_for("cpu"), "prepared", root_dir=tmp_path)
    _, result = InlineBuilder(Builder(cpu, cache_dir=cache_dir)).build(typical_requests(False)[0], workspace)
    assert result.ok, result.diagnostics
    folder = Path(single.path).parent.name  # main.cpp's header (the command names the cache as <cache>)
    assert any(f"/{folder}/cudagym_pch.h" in command for command in result.commands), result.commands


def test_the_bytecode_cache_is_filled_then_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudagym import prepare as module

    monkeypatch.setattr(module, "_header", lambda builder: module.Prepared("precompiled header", "skipped"))
    # the headers are another test's: this one's empty cache would build them anew (minutes on CI's cores)
    skipped = module.Prepared("single-file headers", "skipped")
    monkeypatch.setattr(module, "single_file_headers", lambda builder: skipped)
    monkeypatch.setattr(bytecode, "fill_sources", lambda packages: [])  # CI's cores: the imports only
    config = EvalConfig(tuning=Tuning(bytecode_cache=True))
    first = prepare(resolve_backend("cpu"), cache_dir=tmp_path, config=config, modules=("json",))[-1]
    assert first.status == "built" and first.path == str(bytecode.folder(tmp_path)), first
    assert "files" in first.detail and bytecode.entries(bytecode.folder(tmp_path))[0] > 0
    second = prepare(resolve_backend("cpu"), cache_dir=tmp_path, config=config, modules=("json",))[-1]
    assert second.status == "present"
    broken = prepare(resolve_backend("cpu"), cache_dir=tmp_path, config=config, modules=("cudagym_no_such",))[-1]
    assert broken.status == "failed" and "No module named" in broken.detail


def test_the_command_prints_each_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepare", "--backend", "cpu", "--bytecode-cache", "off"]) == 0
    out = capsys.readouterr().out
    assert "| part | status | seconds | where | detail |" in out
    assert "| precompiled header | " in out and "| bytecode cache | skipped |" in out
