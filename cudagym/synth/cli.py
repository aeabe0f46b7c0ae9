"""``cudagym synth``: make a task set (``--out DIR --count N --backend cpu|cuda``; see ``docs/synth.md``).

It runs the pipeline (``pipeline.py``) with a progress bar, then writes ``DIR/tasks.parquet`` and the report
(``output.py``). Run it again with the same ``--out`` and settings to resume (a larger ``--count`` continues).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _ops_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        bounds = (int(low), int(high) if sep else int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ops-per-task takes N or LOW-HIGH within 1-5, got {text!r}") from None
    if not 1 <= bounds[0] <= bounds[1] <= 5:
        raise argparse.ArgumentTypeError(f"--ops-per-task must lie within 1-5, got {text!r}")
    return bounds


def add_synth_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``synth`` to the main CLI's subparsers."""
    parser = subparsers.add_parser(
        "synth", help="make an Ops-6K-style task set, filtered by execution", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="the run's folder (created; reused to resume)")
    parser.add_argument("--count", required=True, type=int, help="accepted tasks wanted")
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda"), help="where the filters execute")
    parser.add_argument("--ops-per-task", default=(1, 5), type=_ops_range, metavar="LOW-HIGH", help="default 1-5")
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--workers", default=1, type=int, help="candidates executed at once (default 1)")
    parser.add_argument(
        "--kernelbench",
        type=Path,
        default=None,
        metavar="PATH",
        help="a local KernelBench copy (levelN/*.py) to decontaminate against",
    )
    parser.add_argument("--llm-base-url", default=None, metavar="URL", help="an OpenAI-compatible endpoint")
    parser.add_argument("--model", default=None, help="the endpoint's model (with --llm-base-url)")
    parser.add_argument("--max-candidates", type=int, default=None, help="stop after this many candidates")
    parser.add_argument("--min-ms", type=float, default=None, help="the time window's low end (default per backend)")
    parser.add_argument("--max-ms", type=float, default=None, help="the time window's high end (default per backend)")
    parser.add_argument("--no-compile-check", action="store_true", help="skip the torch.compile filter")
    parser.add_argument("--catalogue", type=Path, default=None, help="a catalogue file to use instead of building one")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_synth)
    return parser


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~cudagym.synth.pipeline.SynthConfig` of parsed arguments; ValueError for a bad combination."""
    from cudagym.synth.filters import FilterConfig
    from cudagym.synth.llm import LLMSettings
    from cudagym.synth.pipeline import SynthConfig

    if bool(args.llm_base_url) != bool(args.model):
        raise ValueError("--llm-base-url and --model go together")
    window = {k: v for k, v in (("min_ms", args.min_ms), ("max_ms", args.max_ms)) if v is not None}
    filters = FilterConfig.for_backend(args.backend, check_compile=not args.no_compile_check, **window)
    return SynthConfig(
        out=args.out,
        count=args.count,
        backend=args.backend,
        ops_range=args.ops_per_task,
        seed=args.seed,
        workers=args.workers,
        kernelbench=args.kernelbench,
        llm=LLMSettings(args.llm_base_url, args.model) if args.llm_base_url else None,
        filters=filters,
        catalogue=args.catalogue,
        max_candidates=args.max_candidates,
    )


def run_synth(args: argparse.Namespace) -> int:
    """Runs a synthesis; 0 when the count was reached, 1 when the candidates ran out first or the input was bad."""
    from cudagym.errors import BackendUnavailable
    from cudagym.synth.output import PARQUET, write_outputs
    from cudagym.synth.pipeline import Pipeline

    try:
        config = config_from_args(args)
        pipeline = Pipeline(config)
    except (ValueError, FileNotFoundError, ImportError, BackendUnavailable) as exc:
        print(f"cudagym synth: {exc}", file=sys.stderr)
        return 1
    bar = None
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is the synth extra's; the run goes on without it
        tqdm = None
    if not args.no_progress and tqdm is not None:
        done = sum(o.accepted for o in pipeline.journal())
        bar = tqdm(total=config.count, initial=min(done, config.count), desc="accepted", unit="task")
    result = pipeline.run(
        progress=(lambda o: bar.update(1) if o.accepted and bar.n < bar.total else None) if bar else None
    )
    if bar is not None:
        bar.close()
    counts = write_outputs(
        config.out, result.outcomes, config.count, pipeline.backend.device_name, result.catalogue.version
    )
    kept = min(counts["accepted"], config.count)
    print(f"{kept} task(s) accepted of {counts['candidates']} candidates: {config.out / PARQUET}")
    print("dropped: " + (", ".join(f"{k} {v}" for k, v in counts["dropped"].items()) or "none"))
    return 0 if result.complete else 1
