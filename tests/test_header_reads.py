"""The reads of torch's headers (``cudagym.header_reads``): read once by the preprocessor, then kept in the cache
folder for the next process; word lists bounded to the most recently used."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cudagym_testing import RELU, stand_in_builder, stand_in_headers

from cudagym import header_reads
from cudagym.build import BuildOptions
from cudagym.header_reads import HeaderReads, keep_newest
from cudagym.light_headers import BINDING_PROBE, PROBE
from cudagym.tasks import load
from cudagym.workspace import Workspace
from cudagym.workspace_headers import WorkspaceHeaders


def test_a_folder_of_word_lists_keeps_the_most_recently_used(tmp_path: Path) -> None:
    for age, name in enumerate("abcde"):
        (tmp_path / f"{name}.json").write_text("[]")
        os.utime(tmp_path / f"{name}.json", (1000 - age, 1000 - age))  # a: the newest
    keep_newest(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    keep_newest(tmp_path / "missing", 2)  # nothing kept yet: nothing to do


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_guard_is_read_once_by_the_cxx_preprocessor_and_kept_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = stand_in_headers(
        tmp_path,
        "#pragma once\nint light_fn();\n",
        "#pragma once\n#include <torch/types.h>\nint heavy_fn();\n#define HEAVY 1\n",
        **{"torch/csrc/utils/pybind.h": "#pragma once\nint bound_fn();\n", "torch/csrc/Exceptions.h": "#pragma once\n"},
    )
    workspace = Workspace(load("builtin").get(RELU).source_for("cuda"), "header reads test", root_dir=tmp_path)
    reads = HeaderReads(stand_in_builder(tmp_path / "cache", stand_in, BuildOptions(use_pch=False)))
    view = WorkspaceHeaders.take(workspace, reads.builder.cache_dir)
    command = ["g++", "-isystem", str(stand_in), "-std=c++17", "-c", "main.cpp"]
    binding = reads.heavy_only(command, BINDING_PROBE, view)
    cuda = reads.heavy_only(command, PROBE, view)
    assert binding is not None and cuda is not None
    assert "heavy_fn" in binding.names and "HEAVY" in binding.macros and binding.python_kept
    assert "bound_fn" not in binding.names and not cuda.python_kept  # the probes differ; so do their keys
    assert len(list((tmp_path / "cache" / "light").glob("*.json"))) == 2
    # a new process reads them from the cache folder, without the preprocessor
    monkeypatch.setattr(header_reads, "_HEAVY_ONLY", {})
    monkeypatch.setattr(HeaderReads, "_preprocess", lambda *args: pytest.fail("preprocessed again"))
    assert reads.heavy_only(command, BINDING_PROBE, view) == binding
