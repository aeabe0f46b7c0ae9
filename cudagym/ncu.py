"""Summaries of Nsight Compute reports for the agent: the candidate's own kernels, a few figures each."""

from __future__ import annotations

NCU_METRICS = (
    "Duration",
    "Compute (SM) Throughput",
    "Memory Throughput",
    "DRAM Throughput",
    "Achieved Occupancy",
    "Theoretical Occupancy",
    "Registers Per Thread",
)


def summarize_ncu(csv_text: str) -> str:
    """One line per profiled kernel of the candidate (PyTorch's own kernels left out) from ncu's CSV."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(csv_text[csv_text.find('"ID"') :])))
    kernels: dict[tuple[str, str], dict[str, str]] = {}
    for row in rows:
        name = row.get("Kernel Name", "")
        if not name or "at::native" in name or name.startswith(("at::", "void at::")):
            continue
        entry = kernels.setdefault((row.get("ID", ""), name), {})
        metric = row.get("Metric Name", "")
        if metric in NCU_METRICS:
            entry[metric] = f"{row.get('Metric Value', '')} {row.get('Metric Unit', '')}".strip()
    if not kernels:
        seen = sorted({row.get("Kernel Name", "")[:60] for row in rows if row.get("Kernel Name")})
        notes = [line.strip() for line in csv_text.splitlines() if line.startswith(("==ERROR==", "==WARNING=="))]
        detail = f" Profiled: {', '.join(seen[:6])}." if seen else " It profiled no kernel at all."
        if notes:
            detail += " ncu said: " + " | ".join(notes[:4])[:600]
        return "ncu profiled no kernels of yours (only PyTorch's own, or none)." + detail
    lines = []
    for (_, name), metrics in list(kernels.items())[:12]:
        figures = ", ".join(f"{k}: {v}" for k, v in metrics.items())
        lines.append(f"- {name[:90]}: {figures}")
    return "\n".join(lines)
