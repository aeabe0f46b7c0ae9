"""Decontamination: a KernelBench twin is caught, duplicates within the set are caught, a new task is kept."""

from __future__ import annotations

from pathlib import Path

from cudagym.synth.catalogue import Catalogue
from cudagym.synth.decontaminate import Decontaminator, Fingerprint, load_kernelbench, normalised_tokens, op_key
from cudagym.synth.records import Composition, DropReason, Step
from cudagym.synth.render import candidate
from cudagym.tasks.kernelbench import derive_ops


def _single(catalogue: Catalogue, name: str, sizes: dict[str, int]) -> Fingerprint:
    ops = {op.name: op for op in catalogue.ops}
    shape = ("batch_size", "features")
    composition = Composition((shape,), (Step(name, None, {}, shape),), sizes)
    made = candidate(composition, ops, 0, 0)
    return Fingerprint.of("synth/x", made.code, made.ops)


def test_a_rendered_kernelbench_op_is_a_twin(kernelbench_dir: Path, small_catalogue: Catalogue) -> None:
    decontaminator = Decontaminator(load_kernelbench(kernelbench_dir))
    verdict = decontaminator.judge(_single(small_catalogue, "torch.nn.ReLU", {"batch_size": 16, "features": 64}))
    assert verdict.reason is DropReason.KERNELBENCH_TWIN
    assert verdict.nearest_kernelbench == "kernelbench/level1/19_ReLU", verdict
    code = (kernelbench_dir / "level2" / "12_Gemm_Multiply_LeakyReLU.py").read_text()
    renamed = code.replace("Model", "Net").replace("x", "inp").replace("0.1", "0.7")  # names and constants only
    again = decontaminator.judge(Fingerprint.of("copy", renamed, derive_ops(renamed)))
    assert again.reason is DropReason.KERNELBENCH_TWIN and again.kernelbench_similarity == 1.0


def test_a_new_chain_is_kept_with_its_nearest_task(kernelbench_dir: Path, small_catalogue: Catalogue) -> None:
    decontaminator = Decontaminator(load_kernelbench(kernelbench_dir))
    ops = {op.name: op for op in small_catalogue.ops}
    shape = ("batch_size", "features")
    reduced = ("batch_size", "1")
    steps = (
        Step("transformers.models.llama.modeling_llama.rotate_half", None, {}, shape),
        Step("torch.amax", None, {}, reduced),
        Step("torch.sub", "value:1", {}, shape),
        Step("torch.sigmoid", None, {}, shape),
    )
    made = candidate(Composition((shape,), steps, {"batch_size": 8, "features": 32}), ops, 0, 0)
    verdict = decontaminator.judge(Fingerprint.of("synth/new", made.code, made.ops))
    assert verdict.passed, verdict
    assert verdict.nearest_kernelbench is not None and 0 < verdict.kernelbench_similarity < 0.85


def test_duplicates_within_the_set(small_catalogue: Catalogue) -> None:
    decontaminator = Decontaminator()
    first = _single(small_catalogue, "torch.tanh", {"batch_size": 16, "features": 64})
    assert decontaminator.judge(first).passed
    decontaminator.keep(first)
    other_sizes = _single(small_catalogue, "torch.tanh", {"batch_size": 4, "features": 2048})
    assert decontaminator.judge(other_sizes).reason is DropReason.DUPLICATE
    assert decontaminator.judge(_single(small_catalogue, "torch.sigmoid", {"batch_size": 4, "features": 8})).passed


def test_normalisation_ignores_names_and_constants_not_ops() -> None:
    a = "class Model:\n    def forward(self, x):\n        return torch.relu(x * 2.0)\n"
    b = "class Net:\n    def forward(self, inp):\n        return torch.relu(inp * 5.0)\n"
    c = "class Model:\n    def forward(self, x):\n        return torch.tanh(x * 2.0)\n"
    assert normalised_tokens(a) == normalised_tokens(b) != normalised_tokens(c)
    assert op_key(["torch.nn.ReLU", "torch.relu", "torch.nn.functional.gelu"]) == ("relu", "gelu")
