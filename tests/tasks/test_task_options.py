"""Task-set options: ``sizes=`` (the same option as ``cudagym tasks check --sizes``) and the refusal of options no
loader takes, the same for every set."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load
from cudagym.tasks.cli import main as tasks_main
from cudagym.tasks.kernelbench import load_kernelbench
from cudagym.tasks.ops6k import load_ops6k

RELU = "kernelbench/level1/19_ReLU"
SMALL = {"batch_size": 16, "dim": 4096}


def test_sizes_rewrite_the_constants_each_task_assigns(kernelbench_dir: Path) -> None:
    native = load("kernelbench", path=kernelbench_dir, level=1)
    sized = load("kernelbench", path=kernelbench_dir, level=1, sizes=SMALL)
    assert native.ids == sized.ids  # ids stay: filters and results keep naming the same problems
    relu, relu_native = sized.get(RELU), native.get(RELU)
    assert "batch_size = 16\n" in relu.source and "dim = 4096\n" in relu.source
    assert "batch_size = 4096" in relu_native.source and dict(relu.metadata.extra["size_overrides"]) == SMALL
    assert relu.fingerprint("cpu") != relu_native.fingerprint("cpu")  # baselines and verdicts of their own
    matmul = sized.get("kernelbench/level1/1_Square_matrix_multiplication_")  # assigns neither: unchanged
    assert matmul.source == native.get(matmul.id).source and "size_overrides" not in matmul.metadata.extra


def test_sizes_win_over_a_task_size_profile() -> None:
    relu = load("builtin", ids=["builtin/relu"], sizes={"N": 1024})[0]
    assert relu.source_for("cpu").count("N = 1024\n") == 1 and relu.source_for("cuda").count("N = 1024\n") == 1


def test_a_size_no_task_assigns_is_refused_with_the_names_they_do(kernelbench_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"batchsize.*the tasks assign: .*batch_size.*Did you mean 'batch_size'"):
        load("kernelbench", path=kernelbench_dir, level=1, sizes={"batchsize": 16})


@pytest.mark.parametrize(
    ("name", "options", "typo"),
    [
        ("builtin", {}, "pathh"),
        ("kernelbench", {"path": "unused"}, "overrides"),
        ("ops6k", {"path": "unused"}, "size"),
    ],
)
def test_unknown_options_are_refused_alike_by_every_loader(name: str, options: dict, typo: str) -> None:
    with pytest.raises(TypeError) as raised:
        load(name, **options, **{typo: 1})
    message = str(raised.value)
    assert f"unknown option(s) for task set {name!r}: {typo}" in message
    assert "valid: " in message and "sizes" in message and "ids" in message and "path" in message
    if typo == "size":
        assert "Did you mean 'sizes'?" in message


def test_the_loaders_refuse_unknown_options_when_called_directly(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        load_kernelbench(tmp_path, overrides={"dim": 1})
    with pytest.raises(TypeError):
        load_ops6k(tmp_path, sizes={"dim": 1})


def test_gym_make_passes_sizes_and_refuses_typos(kernelbench_dir: Path) -> None:
    env = CudaKernelEnv("kernelbench", path=str(kernelbench_dir), ids=[RELU], sizes=SMALL, backend="cpu")
    try:
        obs, info = env.reset()
        assert "batch_size = 16\n" in obs and info["memory_warning"] is None
    finally:
        env.close()
    with pytest.raises(TypeError, match="sizes"):
        CudaKernelEnv("kernelbench", path=str(kernelbench_dir), ids=[RELU], size=SMALL, backend="cpu")


def test_the_cli_takes_the_same_sizes(kernelbench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tasks", "show", RELU, "--path", str(kernelbench_dir)]
    assert tasks_main([*argv, "--sizes", "batch_size=16", "dim=4096"]) == 0
    shown = capsys.readouterr().out
    assert "batch_size = 16\n" in shown and "size_overrides" in shown
    assert tasks_main([*argv, "--set", "batch_size=16"]) == 0  # --set: the same option
    assert "batch_size = 16\n" in capsys.readouterr().out
    assert tasks_main([*argv, "--sizes", "batchsize=16"]) == 1  # a typo is an error, not ignored
    assert "Did you mean 'batch_size'?" in capsys.readouterr().err
