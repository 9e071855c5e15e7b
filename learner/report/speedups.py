"""Speedup results tables (as in the CUDA-L1 paper), a verdict table and the report plot.

For a set of scored samples the paper reports the mean and maximum speedup, the 75th, 50th and
25th percentile speedups, the number of successes (correct, hence with a speedup) out of the
total, and how many are faster than the reference (speedup > 1). **A failed sample counts as
speedup 0** in the mean and the percentiles: that is the paper's convention and the headline
here, because a stage that stops solving its slow tasks would otherwise look faster. The same
figures over the successful samples only are kept beside it (``*_ok`` fields, second table).
Percentiles use numpy's "linear" interpolation.

    write_report("out/level1", {"after SFT": [2.0, None, 1.1], "after RL": [3.0, 1.5, None]},
                 {"after SFT": ["OK", "INCORRECT", "OK"], "after RL": ["OK", "OK", "TIMEOUT"]})

writes ``level1.txt`` (both tables and the verdict counts), ``level1.md`` (the same, with the
plot), ``level1.json`` and ``level1.png``: one cumulative-distribution curve per label on a log
speedup axis (failures sit at the left edge: the curve starts at the failure share), and beside
it one bar of verdict counts per label.
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
    """Summary statistics of the speedups of one set of samples.

    ``mean``/``max``/``p75``/``p50``/``p25``: over all samples, a failure counting as 0 (the
    paper's table); None only when there are no samples. ``*_ok``: over successes only (None
    when there are none)."""

    total: int
    success: int  # samples with verdict OK (they have a speedup)
    speedup_gt_1: int
    mean: float | None
    max: float | None
    p75: float | None
    p50: float | None
    p25: float | None
    mean_ok: float | None
    p75_ok: float | None
    p50_ok: float | None
    p25_ok: float | None
    geomean_ok: float | None

    @property
    def success_rate(self) -> float:
        return self.success / self.total if self.total else 0.0

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
    every = np.asarray([0.0 if s is None else float(s) for s in speedups], dtype=np.float64)
    head: dict[str, float | None] = dict.fromkeys(("mean", "max", "p75", "p50", "p25"))
    if total:
        p75, p50, p25 = (float(x) for x in np.percentile(every, [75, 50, 25], method="linear"))
        head = dict(mean=float(every.mean()), max=float(every.max()), p75=p75, p50=p50, p25=p25)
    tail: dict[str, float | None] = dict.fromkeys(("mean_ok", "p75_ok", "p50_ok", "p25_ok", "geomean_ok"))
    if ok.size:
        p75, p50, p25 = (float(x) for x in np.percentile(ok, [75, 50, 25], method="linear"))
        tail = dict(mean_ok=float(ok.mean()), p75_ok=p75, p50_ok=p50, p25_ok=p25,
                    geomean_ok=float(np.exp(np.log(ok).mean())))
    return SpeedupSummary(total=total, success=int(ok.size), speedup_gt_1=int(np.count_nonzero(ok > 1.0)),
                          **head, **tail)  # type: ignore[arg-type]


def _fmt_speedup(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _cells(label: str, s: SpeedupSummary, successes_only: bool) -> list[str]:
    if successes_only:
        figures = [s.mean_ok, None if not s.success else s.max, s.p75_ok, s.p50_ok, s.p25_ok]
    else:
        figures = [s.mean, s.max, s.p75, s.p50, s.p25]
    return [label, *(_fmt_speedup(v) for v in figures), f"{s.success}/{s.total}", str(s.speedup_gt_1)]


def format_table(rows: Mapping[str, SpeedupSummary], *, title: str | None = None,
                 successes_only: bool = False) -> str:
    """A fixed-width text table, one row per label (label left-aligned, figures right-aligned).

    By default failures count as speedup 0 (the paper's table); `successes_only` gives the
    figures over successful samples."""
    body = [_cells(label, s, successes_only) for label, s in rows.items()]
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


def format_markdown(rows: Mapping[str, SpeedupSummary], *, successes_only: bool = False) -> str:
    """The same table as GitHub-flavoured markdown (figures right-aligned)."""
    out = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    for label, s in rows.items():
        out.append("| " + " | ".join(_cells(_md_escape(label), s, successes_only)) + " |")
    return "\n".join(out) + "\n"


def verdict_breakdown(verdicts: Sequence[str]) -> dict[str, int]:
    """Counts per verdict, most frequent first (ties by name)."""
    counts = collections.Counter(str(v) for v in verdicts)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def verdict_markdown(breakdowns: Mapping[str, Mapping[str, int]]) -> str:
    """One row per label, one column per verdict seen anywhere (counts)."""
    names = sorted({v for c in breakdowns.values() for v in c}, key=lambda v: (v != "OK", v))
    out = ["| label | " + " | ".join(names) + " | total |", "|:---|" + "---:|" * (len(names) + 1)]
    for label, counts in breakdowns.items():
        cells = [str(counts.get(v, 0)) for v in names] + [str(sum(counts.values()))]
        out.append(f"| {_md_escape(label)} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# Fixed colours so a verdict looks the same in every report.
_VERDICT_COLORS = {
    "OK": "#2ca02c", "INCORRECT": "#d62728", "PARSE_FAILURE": "#7f7f7f", "COMPILE_ERROR": "#ff7f0e",
    "LOAD_ERROR": "#bcbd22", "RUNTIME_ERROR": "#9467bd", "TIMEOUT": "#8c564b", "CUDA_FAULT": "#e377c2",
    "HACK_DETECTED": "#000000", "INFRA_ERROR": "#17becf", "LOST": "#c7c7c7",
}


def speedup_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Powers of two between `lo` and `hi`, at most `most` of them, always including 1x: every
    k-th octave when the range spans more than `most`."""
    first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((last - first + 1) / most))
    return [2.0 ** k for k in range(first, last + 1) if k % step == 0]


def _tick_label(t: float) -> str:
    return f"{t:g}x" if t >= 1 else f"1/{1 / t:g}x"


def write_plot(
    speedups: Mapping[str, Sequence[float | None]],
    verdicts: Mapping[str, Sequence[str]],
    path: str | Path,
    *,
    title: str = "Speedups of sampled kernels",
) -> Path:
    """Left: one empirical CDF per label over all samples on a log axis (1x, 2x, 4x ...), failures
    at the left edge (a curve starts at its failure share). Right: one bar of verdict counts per
    label. Returns the PNG path."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # never needs a display; a loaded pyplot keeps its backend
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_labels = max(len(speedups), len(verdicts), 1)
    legend_rows = math.ceil(n_labels / 2) if n_labels > 4 else n_labels
    fig = Figure(figsize=(12, 4.4 + 0.2 * legend_rows), dpi=110)
    FigureCanvasAgg(fig)
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    if n_labels > 10:  # the default cycle repeats after ten colours
        ax.set_prop_cycle(color=[matplotlib.colormaps["tab20"](i % 20) for i in range(n_labels)])
    ok_all = [float(s) for v in speedups.values() for s in v if s is not None]
    lo = min([*ok_all, 1.0]) / 1.5
    hi = max([*ok_all, 1.0]) * 1.5
    for label, vals in speedups.items():
        n = len(vals)
        ok = np.sort([float(s) for s in vals if s is not None])
        fail = n - ok.size
        if n == 0:
            ax.plot([], [], label=f"{label} (no samples)")
            continue
        xs = np.concatenate([[lo], ok, [hi]])
        ys = np.concatenate([[fail / n], (fail + np.arange(1, ok.size + 1)) / n, [1.0]])
        ax.step(xs, ys, where="post", linewidth=2,
                label=f"{label}: {ok.size}/{n} OK, {np.count_nonzero(ok > 1.0)} > 1x")
    ax.set_xscale("log", base=2)
    ticks = speedup_ticks(lo, hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([_tick_label(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, 1.02)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("speedup over the reference (log scale)")
    ax.set_ylabel("share of samples at or below (failures count as 0)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if speedups:  # below both panels, across the figure: inside, many labels would hide the curves
        fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2 if n_labels > 4 else 1,
                   fontsize=7.5, frameon=False)
    else:
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", color="gray")

    labels = list(speedups) or list(verdicts)
    names = sorted({v for vs in verdicts.values() for v in vs}, key=lambda v: (v != "OK", v))
    left = np.zeros(len(labels))
    for name in names:
        counts = np.array([sum(1 for v in verdicts.get(lb, []) if v == name) for lb in labels], float)
        bx.barh(range(len(labels)), counts, left=left, color=_VERDICT_COLORS.get(name), label=name)
        left += counts
    bx.set_yticks(range(len(labels)))
    bx.set_yticklabels(labels, fontsize=8)
    bx.invert_yaxis()
    bx.set_xlabel("samples")
    bx.set_title("verdicts")
    if names:
        bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=7, frameon=False)
    else:
        bx.text(0.5, 0.5, "no verdicts", transform=bx.transAxes, ha="center", color="gray")
    fig.tight_layout(rect=(0, 0.2 * legend_rows / (legend_rows + 4) + 0.02, 1, 1) if speedups else None)
    fig.savefig(path, format="png")
    return path


def write_report(
    path_prefix: str | Path,
    speedups: Mapping[str, Sequence[float | None]],
    verdicts_by_label: Mapping[str, Sequence[str]] | None = None,
    *,
    title: str | None = None,
    notes_text: str = "",
    notes_md: str = "",
    extra_json: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``<prefix>.txt`` / ``.md`` / ``.json`` / ``.png``; returns them keyed by extension.

    `speedups` maps a label to its samples' speedups (None = not successful). The text and
    markdown files hold the paper's table (failures as 0), the table over successes, the verdict
    counts and the given notes; the markdown embeds the plot. The JSON file holds
    ``{"summaries": {label: SpeedupSummary.to_dict()}, "verdicts": {label: counts}, **extra_json}``.
    """
    prefix = str(path_prefix)
    paths = {ext: Path(f"{prefix}.{ext}") for ext in ("txt", "md", "json", "png")}
    paths["txt"].parent.mkdir(parents=True, exist_ok=True)
    rows = {label: summarize(v) for label, v in speedups.items()}
    verdicts = dict(verdicts_by_label or {})
    breakdowns = {label: verdict_breakdown(v) for label, v in verdicts.items()}

    text = format_table(rows, title=title or "Speedups (failures count as 0, as in the paper)")
    text += "\n" + format_table(rows, title="Over successful samples only", successes_only=True)
    for label, counts in breakdowns.items():
        n = sum(counts.values())
        text += f"\nverdicts: {label} ({n} samples)\n"
        width = max((len(k) for k in counts), default=0)
        for verdict, c in counts.items():
            text += f"  {verdict.ljust(width)}  {c:>6}  {100.0 * c / n:5.1f}%\n"
    if notes_text:
        text += "\n" + notes_text.rstrip() + "\n"
    paths["txt"].write_text(text, encoding="utf-8")

    try:
        write_plot(speedups, verdicts, paths["png"])
    except ImportError:  # a minimal install without matplotlib: the tables are still written
        log.warning("matplotlib is not installed; %s not written (pip install matplotlib)", paths["png"])
        del paths["png"]

    md = f"## {title}\n\n" if title else ""
    md += "Speedups, a failure counting as 0 (the paper's table):\n\n" + format_markdown(rows)
    md += "\nOver successful samples only:\n\n" + format_markdown(rows, successes_only=True)
    if breakdowns:
        md += "\nVerdicts:\n\n" + verdict_markdown(breakdowns)
    if "png" in paths:
        md += f"\n![speedup distribution and verdicts]({paths['png'].name})\n"
    if notes_md:
        md += "\n" + notes_md.rstrip() + "\n"
    paths["md"].write_text(md, encoding="utf-8")

    payload = {"summaries": {label: s.to_dict() for label, s in rows.items()}, "verdicts": breakdowns,
               **(extra_json or {})}
    paths["json"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    log.info("wrote report %s.{%s}", prefix, ",".join(paths))
    return paths
