"""The workspace contract: fixed files, the writable set, and refusals with clear messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.workspace import FIXED_FILES, Workspace, WorkspaceError, WorkspaceLimits


@pytest.fixture
def ws():
    workspace = Workspace(
        "MODEL = 1\n", "instructions", limits=WorkspaceLimits(max_file_bytes=1000, max_files=3, max_total_bytes=2500)
    )
    yield workspace
    workspace.remove()


def test_fixed_files_are_written_and_read_only(ws: Workspace) -> None:
    for name in FIXED_FILES:
        assert (ws.path / name).is_file()
    assert (ws.path / "model.py").read_text() == "MODEL = 1\n"
    assert "REGISTER_BINDING" in (ws.path / "binding_registry.h").read_text()
    assert "PYBIND11_MODULE(cuda_extension" in (ws.path / "binding.cpp").read_text()
    assert ws.tampered_fixed() == []


@pytest.mark.parametrize(
    "path", ["model_new.py", "kernels/a.cu", "kernels/a.cuh", "kernels/b_binding.cpp", "kernels/c.h", "./kernels/d.cu"]
)
def test_writable_set(ws: Workspace, path: str) -> None:
    rel, size = ws.write(path, "int x;\n")
    assert size == 7
    assert (ws.path / rel).read_text() == "int x;\n"


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("model.py", "fixed file"),
        ("binding.cpp", "fixed file"),
        ("../escape.cu", "leaves the workspace"),
        ("kernels/../../escape.cu", "leaves the workspace"),
        ("/tmp/abs.cu", "absolute"),
        ("kernels/a.py", "must end in"),
        ("kernels/sub/a.cu", "outside the writable set"),
        ("notes.txt", "outside the writable set"),
        ("kernels/$x.cu", "file names may use"),
        ("", "empty"),
        ("kernels/" + "a" * 300 + ".cu", "too long"),
    ],
)
def test_refused_paths_say_why(ws: Workspace, path: str, needle: str) -> None:
    with pytest.raises(WorkspaceError, match=needle):
        ws.write(path, "x")


def test_symlinks_are_refused(ws: Workspace, tmp_path) -> None:
    outside = tmp_path / "target.cu"
    outside.write_text("secret")
    os.symlink(outside, ws.path / "kernels" / "link.cu")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.write("kernels/link.cu", "overwrite")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.read("kernels/link.cu")
    assert outside.read_text() == "secret"
    os.unlink(ws.path / "kernels" / "link.cu")
    os.rmdir(ws.path / "kernels")
    os.symlink(tmp_path, ws.path / "kernels")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.write("kernels/x.cu", "x")


def test_size_limits(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="limit is 1000 bytes per file"):
        ws.write("kernels/big.cu", "x" * 1001)
    ws.write("kernels/a.cu", "x" * 900)
    ws.write("kernels/b.cu", "x" * 900)
    with pytest.raises(WorkspaceError, match="would total"):
        ws.write("kernels/c.cu", "x" * 900)
    ws.write("kernels/c.cu", "x")
    with pytest.raises(WorkspaceError, match="at most 3 writable files"):
        ws.write("kernels/d.cu", "x")


def test_edit_replaces_one_exact_occurrence(ws: Workspace) -> None:
    ws.write("kernels/a.cu", "int a = 1;\nint b = 2;\nint b2 = 2;\n")
    rel, line = ws.edit("kernels/a.cu", "int b = 2;", "int b = 3;")
    assert (rel, line) == ("kernels/a.cu", 2)
    assert "int b = 3;" in (ws.path / rel).read_text()
    with pytest.raises(WorkspaceError, match="was not found"):
        ws.edit("kernels/a.cu", "int z", "x")
    with pytest.raises(WorkspaceError, match="occurs 2 times"):
        ws.edit("kernels/a.cu", "int b", "int c")
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.edit("kernels/none.cu", "a", "b")
    with pytest.raises(WorkspaceError, match="fixed file"):
        ws.edit("model.py", "MODEL", "X")


def test_read_numbers_lines_and_pages(ws: Workspace) -> None:
    ws.write("kernels/a.cu", "\n".join(f"line {i}" for i in range(1, 11)))
    _, text = ws.read("kernels/a.cu", offset=3, limit=2)
    assert text.splitlines()[:2] == ["3| line 3", "4| line 4"]
    assert "6 more lines (read with offset=5)" in text
    _, model = ws.read("model.py")
    assert "MODEL = 1" in model
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.read("nope.py")


def test_tampered_fixed_files_are_detected_and_restored(ws: Workspace) -> None:
    target = ws.path / "binding.cpp"
    target.chmod(0o644)
    target.write_text("// changed")
    (ws.path / "model.py").unlink()
    assert sorted(ws.tampered_fixed()) == ["binding.cpp", "model.py"]
    ws.restore_fixed()
    assert ws.tampered_fixed() == []


def test_headers_are_the_agents_headers_of_the_suffixes_asked_sorted_by_name(ws: Workspace) -> None:
    ws.write("kernels/b.cuh", "// b")
    ws.write("kernels/a.h", "// a")
    ws.write("kernels/k.cu", "// a source")  # not a header
    assert ws.headers((".h", ".cuh")) == [("a.h", b"// a"), ("b.cuh", b"// b")]
    assert ws.headers((".cuh",)) == [("b.cuh", b"// b")]


def test_listing_and_remove(ws: Workspace) -> None:
    ws.write("model_new.py", "x = 1\n")
    listing = ws.listing()
    assert "model_new.py" in listing and "writable" in listing and "fixed" in listing
    path = ws.path
    ws.remove()
    ws.remove()
    assert not path.exists()


def test_a_dropped_workspace_removes_its_directory() -> None:
    import gc

    workspace = Workspace("x = 1\n", "do it")
    workspace.write("kernels/k.cpp", "int k;\n")
    path = workspace.path
    del workspace
    gc.collect()
    assert not path.exists()


def test_a_dropped_env_without_close_removes_its_workspace(fast_config: EvalConfig) -> None:
    import gc

    from cudagym.envs import CudaKernelEnv

    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    env.reset(options={"task_id": "builtin/relu"})
    assert env.workspace is not None
    path = env.workspace.path
    assert path.is_dir()
    del env  # as when an exception skips close()
    gc.collect()
    assert not path.exists()


def test_a_thawed_snapshot_holds_the_same_files_and_the_same_changes(tmp_path: Path) -> None:
    from cudagym.workspace import Workspace as _Workspace

    original = _Workspace("class Model: pass\n", "do it", root_dir=tmp_path)
    original.write("kernels/a.cpp", "int a() { return 1; }\n")
    model = original.path / "model.py"
    model.chmod(0o644)
    model.write_text("changed\n")
    copy = _Workspace.thaw(original.freeze(), root_dir=tmp_path)
    try:
        assert copy.path != original.path and copy.snapshot() == original.snapshot()
        assert copy.tampered_fixed() == original.tampered_fixed() == ["model.py"]
        copy.restore_fixed()
        assert (copy.path / "model.py").read_text() == "class Model: pass\n"
    finally:
        copy.remove()
        original.remove()
