"""The children's bytecode cache (cudagym/bytecode.py): when it is on, who writes it and who only reads it."""

from __future__ import annotations

import fcntl
import importlib.util
import re
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

from cudagym import bytecode
from cudagym.backends import resolve_backend
from cudagym.candidate_pool import CandidatePool
from cudagym.eval_config import EvalConfig, resolve_bytecode
from cudagym.evaluator import LocalEvaluator
from cudagym.harness.protocol import CandidateJob, Load
from cudagym.reference_process import ReferenceProcess
from cudagym.sandbox import ChildLimits, exchange_dir
from cudagym.tasks import load
from cudagym.tuning import Tuning

# a single-file solution whose import needs a module no trusted child imports (the fork server leaves
# torch.utils.cpp_extension out on purpose): the candidate must compile it and must not write its bytecode
IMPORTS_CPP_EXTENSION = """import torch.nn as nn
import torch.utils.cpp_extension


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def cached_path(prefix: Path, module: str) -> Path:
    """Where Python keeps ``module``'s bytecode under the bytecode folder ``prefix``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin
    source = Path(spec.origin)
    return prefix / source.parent.relative_to("/") / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def pyc_files(prefix: Path) -> set[Path]:
    return set(prefix.rglob("*.pyc"))


def test_only_a_writer_given_a_folder_may_write() -> None:
    env = {"PATH": "/bin", bytecode.NO_WRITE_ENV: "1"}
    assert bytecode.launch(env, writer=True) == (["-B"], env)  # no folder: nobody writes into the installation
    with_folder = {**env, **bytecode.child_env(Path("/c/pycache"))}
    flags, writer_env = bytecode.launch(with_folder, writer=True)
    assert flags == [] and bytecode.NO_WRITE_ENV not in writer_env
    assert writer_env[bytecode.PREFIX_ENV] == "/c/pycache"
    flags, reader_env = bytecode.launch(with_folder, writer=False)
    assert flags == ["-B"] and reader_env[bytecode.NO_WRITE_ENV] == "1"
    assert reader_env[bytecode.PREFIX_ENV] == "/c/pycache"
    assert bytecode.child_env(None) == {}


def test_auto_turns_the_cache_on_only_where_it_helps_and_candidates_cannot_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bytecode.resolve(False, tmp_path) is None
    assert bytecode.resolve(True, tmp_path) == tmp_path / "pycache"
    monkeypatch.setattr(bytecode, "installation_lacks_bytecode", lambda: False)
    assert bytecode.resolve("auto", tmp_path) is None  # the installation's own bytecode serves every child
    monkeypatch.setattr(bytecode, "installation_lacks_bytecode", lambda: True)
    monkeypatch.setattr(bytecode, "_installation_writable", lambda: True)
    assert bytecode.resolve("auto", tmp_path) == tmp_path / "pycache"  # candidates could change the sources anyway
    monkeypatch.setattr(bytecode, "_installation_writable", lambda: False)
    monkeypatch.setattr(bytecode, "candidates_cannot_write", lambda path, readonly: (False, "writable"))
    assert bytecode.resolve("auto", tmp_path) is None
    monkeypatch.setattr(bytecode, "candidates_cannot_write", lambda path, readonly: (True, "read-only"))
    assert bytecode.resolve("auto", tmp_path) == tmp_path / "pycache"
    assert resolve_bytecode(EvalConfig(tuning=Tuning(bytecode_cache=False)), tmp_path) is None
    with pytest.raises(ValueError, match="bytecode_cache"):
        Tuning(bytecode_cache="yes")  # type: ignore[arg-type]


def test_candidates_may_write_the_exchange_folder_so_no_cache_lives_there(tmp_path: Path) -> None:
    blocked, why = bytecode.candidates_cannot_write(Path(exchange_dir()) / "pycache", True)
    assert not blocked and why
    blocked, why = bytecode.candidates_cannot_write(tmp_path / "pycache", False)
    assert not blocked and "turned off" in why


def test_the_reference_and_the_fork_server_write_the_cache_and_candidates_only_read_it(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    env = bytecode.child_env(prefix)
    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig(), env=env)
    try:
        source = load("builtin").get("builtin/relu").source_for("cpu")
        ref.call(Load(source=source, device="cpu", dtype="float32", weight_seed=1, threads=backend.threads))
    finally:
        ref.close()
    assert cached_path(prefix, "torch").is_file()  # what the trusted reference imported is cached
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "model_new.py").write_text(IMPORTS_CPP_EXTENSION)
    job = CandidateJob(mode="import", workspace=str(workspace))
    for fork_server in (False, True):
        # a writable file system: what keeps the candidate from writing is its interpreter's flags alone
        limits = ChildLimits(readonly_filesystem=False)
        pool = CandidatePool(backend, limits, prestart=1, env=env, fork_server=fork_server)
        try:
            pool.fill()
            deadline = time.monotonic() + 180
            while not (pool._spares and pool._spares[0].receive(deadline) == {"stage": "warm"}):
                time.sleep(0.05)
                assert time.monotonic() < deadline, "no spare candidate became ready"
            before = pyc_files(prefix)  # a fork server has written what it imported by now
            child, finished, code = pool.run(job, timeout=120)
            assert finished and code == 0, child.output.text()
            assert pyc_files(prefix) == before, f"a candidate wrote bytecode (fork server: {fork_server})"
        finally:
            pool.close()
    assert not cached_path(prefix, "torch.utils.cpp_extension").exists()
    assert cached_path(prefix, "torch._dynamo").is_file()  # the fork server's warm-up imports (its preimport)


def test_warm_fills_the_folder_with_what_the_children_import(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    seconds = bytecode.warm(prefix, modules=("torch",))
    assert seconds > 0 and cached_path(prefix, "torch").is_file()
    count, size = bytecode.entries(prefix)
    assert count > 100 and size > count * 100
    with pytest.raises(RuntimeError, match="No module named"):
        bytecode.warm(prefix, modules=("cudagym_no_such_module",))


def small_package() -> str:
    """The folder of a small installed package (torch needs filelock): what the filler tests compile."""
    spec = importlib.util.find_spec("filelock")
    assert spec is not None and spec.submodule_search_locations
    return next(iter(spec.submodule_search_locations))


def test_the_filler_compiles_its_sources_once_and_marks_the_folder(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    filler = bytecode.Filler(prefix)
    filler.sources = [small_package()]
    assert not bytecode.filled(prefix)
    seconds = filler.run()
    assert seconds is not None and filler.seconds == seconds and bytecode.filled(prefix)
    assert cached_path(prefix, "filelock").is_file()
    again = bytecode.Filler(prefix)
    assert again.run() is None and again.skipped == "filled already"


def test_one_filler_per_folder_and_a_stopped_one_marks_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "pycache"
    prefix.mkdir()
    with open(prefix / ".fill.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process fills
        busy = bytecode.Filler(prefix)
        assert busy.run() is None and "another process" in busy.skipped
    stopped = bytecode.Filler(prefix)
    stopped.sources = [small_package()]
    stopped.stop()
    assert stopped.run() is None and not bytecode.filled(prefix)
    unwritable = bytecode.Filler(tmp_path / "file" / "pycache")
    (tmp_path / "file").write_text("not a folder")
    assert unwritable.run() is None and "Error" in unwritable.skipped  # reported, never raised


def test_the_fill_plan_leaves_out_tests_and_the_packages_beneath_the_standard_library() -> None:
    plan = dict(bytecode.fill_plan(bytecode.fill_sources()))
    stdlib = sysconfig.get_path("stdlib")
    assert stdlib in plan and small_package() in plan
    skip_stdlib, skip_package = re.compile(plan[stdlib]), re.compile(plan[small_package()])
    assert skip_stdlib.search(f"{stdlib}/site-packages/") and skip_stdlib.search(f"{stdlib}/test/")
    assert not skip_stdlib.search(f"{stdlib}/json/") and not skip_stdlib.search(f"{stdlib}/asyncio/")
    assert skip_package.search("/x/site-packages/sympy/core/tests/")
    assert skip_package.search("/x/site-packages/torch/testing/_internal/")
    assert not skip_package.search(f"{stdlib}/site-packages/torch/nn/")  # a package under the stdlib is kept


def test_an_evaluator_on_an_empty_folder_fills_it_in_the_background_and_stops_at_close(tmp_path: Path) -> None:
    task = load("builtin").get("builtin/relu")
    evaluator = LocalEvaluator(
        task, resolve_backend("cpu"), EvalConfig(tuning=Tuning(bytecode_cache=True)), cache_dir=tmp_path
    )
    filler = evaluator.bytecode_filler
    try:
        assert filler is not None and filler.path == tmp_path / "pycache"
        assert any(t.name == "cudagym-bytecode" for t in threading.enumerate())
    finally:
        evaluator.close()
    deadline = time.monotonic() + 30
    while any(t.name == "cudagym-bytecode" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert filler.proc is None or filler.proc.poll() is not None  # no compile left running
    assert not bytecode.filled(filler.path)
    filled = LocalEvaluator(
        task, resolve_backend("cpu"), EvalConfig(tuning=Tuning(bytecode_cache=False)), cache_dir=tmp_path
    )
    try:
        assert filled.bytecode_filler is None and filled.bytecode_dir is None
    finally:
        filled.close()


def test_a_filler_in_the_background_that_cannot_write_says_so_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("not a folder")
    filler = bytecode.Filler(tmp_path / "file" / "pycache")
    with caplog.at_level("WARNING", logger="cudagym.bytecode"):
        thread = threading.Thread(target=filler.run)
        thread.start()
        thread.join(timeout=30)
    assert "Error" in filler.skipped and f"compiling bytecode into {filler.path} failed" in caplog.text
