"""Decontamination and dedupe: a generated task must not be a KernelBench task (the evaluation set) nor a task the
run already kept.

Two measures compare tasks:

* the **op sequence**: the names of the ops in order of first use, lower-cased short names (``torch.nn.ReLU`` and
  ``torch.relu`` both read ``relu``), read from the code (``cudagym.tasks.kernelbench.derive_ops``) for KernelBench
  and from the composition for ours;
* the **normalised-AST similarity**: the ``Model`` class's syntax tree as a sequence of node types in source order,
  with every identifier but attribute names dropped and every constant replaced by one token (so sizes and variable
  names do not count, the ops and the wiring do), compared as the Jaccard index of its 3-grams.

A candidate is a *KernelBench twin* when it shares a task's op sequence and its similarity reaches
``sequence_threshold``, or when its similarity reaches ``ast_threshold`` whatever the ops; within the set it is a
*duplicate* when its normalised tree equals a kept one's, and a *near duplicate* when it shares a kept one's op
sequence with a similarity of at least ``ast_threshold``. The nearest KernelBench task (highest similarity) is kept for
every candidate.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from cudagym import python_source
from cudagym.synth.records import DropReason, Verdict
from cudagym.tasks.kernelbench import derive_ops

SHINGLE = 3
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")


def op_key(ops: Iterable[str]) -> tuple[str, ...]:
    """The op sequence compared: short lower-case names, each kept at its first use."""
    names = [op.rsplit(".", 1)[-1].lower() for op in ops]
    return tuple(dict.fromkeys(names))


def _tokens(node: ast.AST) -> list[str]:
    tokens = [type(node).__name__]
    if isinstance(node, ast.Attribute):
        tokens.append(node.attr)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant) and isinstance(child.value.value, str):
            continue  # a docstring
        tokens.extend(_tokens(child))
    return tokens


def normalised_tokens(code: str) -> tuple[str, ...]:
    """The normalised tree of the code's classes and functions other than the input functions (empty when the code
    does not parse)."""
    try:
        tree = python_source.parse(code)
    except SyntaxError:
        return ()
    tokens: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) or (isinstance(node, ast.FunctionDef) and node.name not in INPUT_FUNCTIONS):
            tokens.extend(_tokens(node))
    return tuple(tokens)


def shingles(tokens: Sequence[str]) -> frozenset[tuple[str, ...]]:
    if len(tokens) < SHINGLE:
        return frozenset({tuple(tokens)}) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1))


def similarity(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """The Jaccard index of two shingle sets (0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What the comparisons need of one task."""

    ident: str
    ops: tuple[str, ...]
    shingles: frozenset[tuple[str, ...]]
    digest: str

    @classmethod
    def of(cls, ident: str, code: str, ops: Iterable[str]) -> Fingerprint:
        tokens = normalised_tokens(code)
        digest = hashlib.sha256("\x00".join(tokens).encode()).hexdigest()
        return cls(ident, op_key(ops), shingles(tokens), digest)


def load_kernelbench(path: str | Path, levels: Iterable[int] = (1, 2, 3, 4)) -> list[Fingerprint]:
    """The fingerprints of the KernelBench tasks in a local copy (``levelN/*.py``; the levels present are read, ids
    ``kernelbench/levelN/<file stem>``). FileNotFoundError when the folder holds no level."""
    root = Path(path).expanduser()
    found: list[Fingerprint] = []
    for level in levels:
        for file in sorted((root / f"level{level}").glob("*.py")):
            code = file.read_text(errors="replace")
            found.append(Fingerprint.of(f"kernelbench/level{level}/{file.stem}", code, derive_ops(code)))
    if not found:
        raise FileNotFoundError(f"no KernelBench tasks under {root} (expected level1/*.py ... level4/*.py)")
    return found


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """``ast_threshold``: the similarity that alone makes a twin or a near duplicate; ``sequence_threshold``: the one
    that makes a KernelBench twin of a task with the same op sequence (low: our rendering's style, with layers built in
    ``__init__`` and one assignment per op, reads about 0.33 against KernelBench's one-line ``torch.relu(x)`` task
    for the same op, while two tasks that share only boilerplate have no op sequence in common)."""

    ast_threshold: float = 0.85
    sequence_threshold: float = 0.25


class Decontaminator:
    """Judges candidates against KernelBench and the ones kept so far (:meth:`keep` adds one)."""

    def __init__(self, kernelbench: Sequence[Fingerprint] = (), thresholds: Thresholds | None = None) -> None:
        self.kernelbench = list(kernelbench)
        self.thresholds = thresholds or Thresholds()
        self._digests: dict[str, str] = {}
        self._by_ops: dict[tuple[str, ...], list[Fingerprint]] = {}

    def judge(self, print_: Fingerprint) -> Verdict:
        """The verdict on one candidate, with its nearest KernelBench task (one with the same op sequence first, then
        the most similar)."""
        scores = [
            (bool(print_.ops) and print_.ops == other.ops, similarity(print_.shingles, other.shingles), other.ident)
            for other in self.kernelbench
        ]
        same_ops, score, ident = max(scores, default=(False, 0.0, None))
        nearest = {"nearest_kernelbench": ident, "kernelbench_similarity": round(score, 4)}
        top_score, top_ident = max(((value, name) for _, value, name in scores), default=(0.0, ""))
        if same_ops and score >= self.thresholds.sequence_threshold:
            detail = f"{ident}: same op sequence, similarity {score:.2f}"
            return Verdict(DropReason.KERNELBENCH_TWIN, detail, **nearest)
        if top_score >= self.thresholds.ast_threshold:
            return Verdict(DropReason.KERNELBENCH_TWIN, f"{top_ident}: similarity {top_score:.2f}", **nearest)
        if print_.digest in self._digests:
            return Verdict(DropReason.DUPLICATE, f"same normalised code as {self._digests[print_.digest]}", **nearest)
        for kept in self._by_ops.get(print_.ops, []):
            value = similarity(print_.shingles, kept.shingles)
            if value >= self.thresholds.ast_threshold:
                return Verdict(DropReason.NEAR_DUPLICATE, f"{kept.ident}: similarity {value:.2f}", **nearest)
        return Verdict(**nearest)

    def keep(self, print_: Fingerprint) -> None:
        """Adds a kept task to the set later candidates are compared with."""
        self._digests.setdefault(print_.digest, print_.ident)
        self._by_ops.setdefault(print_.ops, []).append(print_)
