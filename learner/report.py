"""Speedup results tables (as in the CUDA-L1 paper) and a log2-speedup histogram.

For a set of scored samples (or tasks), the paper reports the mean and maximum speedup, the 75th,
50th and 25th percentile speedups, the number of successes (correct, hence with a speedup) out of
the total, and how many are faster than the reference (speedup > 1). `summarize` computes those
figures (plus the geometric mean) from a list of speedups in which ``None`` marks an unsuccessful
sample; `format_table` / `format_markdown` lay several summaries out side by side, e.g. one row per
training stage::

    rows = {"after SFT": summarize(sft), "after contrastive RL": summarize(rl)}
    print(format_table(rows, title="KernelBench level 1"))
    write_report("out/level1", rows, {"after SFT": [s for s in sft if s], ...})

All statistics are over successful samples only; percentiles use numpy's "linear" interpolation.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

COLUMNS = ("label", "mean", "max", "75%", "50%", "25%", "success", ">1x")


@dataclasses.dataclass(frozen=True)
class SpeedupSummary:
    """Summary statistics of the speedups of one set of samples."""

    total: int
    success: int  # samples with verdict OK (they have a speedup)
    speedup_gt_1: int
    mean: float | None  # over successes; None when there are none
    max: float | None
    p75: float | None
    p50: float | None
    p25: float | None
    geomean: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpeedupSummary:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def _check_speedup(i: int, s: Any) -> float:
    v = float(s)
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"speedup #{i} is {s!r}; a successful speedup must be finite and > 0")
    return v


def summarize(speedups: Sequence[float | None]) -> SpeedupSummary:
    """Summary of `speedups`, where ``None`` marks a sample that did not succeed.

    Raises `ValueError` for a speedup that is not finite and positive (it cannot come from a
    correct, timed sample and would poison the mean / geomean).
    """
    ok = np.asarray(
        [_check_speedup(i, s) for i, s in enumerate(speedups) if s is not None], dtype=np.float64
    )
    total = len(speedups)
    if ok.size == 0:
        return SpeedupSummary(
            total=total, success=0, speedup_gt_1=0,
            mean=None, max=None, p75=None, p50=None, p25=None, geomean=None,
        )  # fmt: skip
    p75, p50, p25 = (float(x) for x in np.percentile(ok, [75, 50, 25], method="linear"))
    return SpeedupSummary(
        total=total,
        success=int(ok.size),
        speedup_gt_1=int(np.count_nonzero(ok > 1.0)),
        mean=float(ok.mean()),
        max=float(ok.max()),
        p75=p75,
        p50=p50,
        p25=p25,
        geomean=float(np.exp(np.log(ok).mean())),
    )


def _fmt_speedup(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _cells(label: str, s: SpeedupSummary) -> list[str]:
    return [
        label,
        _fmt_speedup(s.mean),
        _fmt_speedup(s.max),
        _fmt_speedup(s.p75),
        _fmt_speedup(s.p50),
        _fmt_speedup(s.p25),
        f"{s.success}/{s.total}",
        str(s.speedup_gt_1),
    ]


def format_table(rows: Mapping[str, SpeedupSummary], *, title: str | None = None) -> str:
    """A fixed-width text table, one row per label (label left-aligned, figures right-aligned)."""
    body = [_cells(label, s) for label, s in rows.items()]
    widths = [max(len(c) for c in col) for col in zip(COLUMNS, *body, strict=False)]

    def line(cells: Sequence[str]) -> str:
        parts = [cells[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    header = line(COLUMNS)
    rule = "-" * len(header)
    out = []
    if title:
        out += [title, "=" * max(len(title), len(header))]
    out += [header, rule, *(line(cells) for cells in body)]
    if not body:
        out.append("(no rows)")
    return "\n".join(out) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def format_markdown(rows: Mapping[str, SpeedupSummary]) -> str:
    """The same table as GitHub-flavoured markdown (figures right-aligned)."""
    out = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    for label, s in rows.items():
        cells = _cells(_md_escape(label), s)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def verdict_breakdown(verdicts: Sequence[str]) -> dict[str, int]:
    """Counts per verdict, most frequent first (ties by name)."""
    counts = collections.Counter(str(v) for v in verdicts)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _log2_values(name: str, values: Sequence[float | None]) -> np.ndarray:
    ok = [_check_speedup(i, v) for i, v in enumerate(values) if v is not None]
    if len(ok) != len(values):
        log.debug("histogram group %r: skipped %d None values", name, len(values) - len(ok))
    return np.log2(np.asarray(ok, dtype=np.float64))


def write_histogram(
    groups: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    title: str = "log2 speedup of successful samples",
) -> Path:
    """Write a PNG histogram of log2(speedup), one overlaid series per group; returns the path.

    All groups share the same bins. A vertical line marks 0 (no speedup). ``None`` entries are
    skipped; empty groups appear in the legend with n=0, and a plot with no data at all says so.
    """
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        # Never needs a display. (When pyplot is already loaded its backend is left alone: switching
        # it would close the caller's figures; the figure below does not go through pyplot anyway.)
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {name: _log2_values(name, vals) for name, vals in groups.items()}
    nonempty = [v for v in data.values() if v.size]

    fig = Figure(figsize=(8, 5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    edges = None
    if nonempty:
        edges = np.histogram_bin_edges(np.concatenate(nonempty), bins="auto")
        if len(edges) > 81:  # "auto" can get very fine on large samples
            edges = np.linspace(edges[0], edges[-1], 81)
    else:
        ax.text(
            0.5, 0.6, "no successful samples", transform=ax.transAxes,
            ha="center", va="center", fontsize=14, color="gray",
        )  # fmt: skip
    for name, v in data.items():
        label = f"{name} (n={v.size})"
        if v.size:
            ax.hist(v, bins=edges, alpha=0.5, label=label)
        else:
            ax.plot([], [], label=label)  # keep the group visible in the legend
    if not nonempty:
        ax.set_xlim(-1, 1)
        ax.set_ylim(0, 1)
    ax.axvline(0.0, color="black", linestyle="--", linewidth=1, label="no speedup (1x)")
    ax.set_xlabel("log2(speedup)   (0 = 1x, 1 = 2x, -1 = 0.5x)")
    ax.set_ylabel("samples")
    ax.set_title(title)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def write_report(
    path_prefix: str | Path,
    rows: Mapping[str, SpeedupSummary],
    groups: Mapping[str, Sequence[float]],
    verdicts_by_label: Mapping[str, Sequence[str]] | None = None,
    *,
    title: str | None = None,
) -> dict[str, Path]:
    """Write ``<prefix>.txt`` / ``.md`` / ``.json`` / ``.png``; returns them keyed by extension.

    The text file holds the table and, when given, the verdict breakdown of each label; the JSON
    file holds ``{"summaries": {label: SpeedupSummary.to_dict()}, "verdicts": {label: counts}}``.
    """
    prefix = str(path_prefix)
    paths = {ext: Path(f"{prefix}.{ext}") for ext in ("txt", "md", "json", "png")}
    paths["txt"].parent.mkdir(parents=True, exist_ok=True)
    breakdowns = {label: verdict_breakdown(v) for label, v in (verdicts_by_label or {}).items()}

    text = format_table(rows, title=title)
    for label, counts in breakdowns.items():
        n = sum(counts.values())
        text += f"\nverdicts: {label} ({n} samples)\n"
        width = max((len(k) for k in counts), default=0)
        for verdict, c in counts.items():
            text += f"  {verdict.ljust(width)}  {c:>6}  {100.0 * c / n:5.1f}%\n"
    paths["txt"].write_text(text, encoding="utf-8")

    md = f"## {title}\n\n" if title else ""
    paths["md"].write_text(md + format_markdown(rows), encoding="utf-8")

    payload = {
        "summaries": {label: s.to_dict() for label, s in rows.items()},
        "verdicts": breakdowns,
    }
    paths["json"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")

    try:
        write_histogram(groups, paths["png"])
    except ImportError:  # a minimal install without matplotlib: the tables are still written
        log.warning("matplotlib is not installed; %s not written (pip install matplotlib)", paths["png"])
        del paths["png"]
    log.info("wrote report %s.{%s}", prefix, ",".join(paths))
    return paths
