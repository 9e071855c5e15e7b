"""Scoring a whole run of candidates: read them, score each once, append results, summarise.

Inputs (``read_candidates``), every line and file checked before anything is scored, with all
problems (bad JSON, missing files, unknown tasks, repeated sample ids) listed in one error:

* a JSONL file, one object per line: ``task`` (a task id/name/file as ``evalfarm score --task``
  takes it; may be left out with ``--task``), ``candidate`` (the candidate's source, or the path
  of its file, relative to the JSONL's folder) and optionally ``sample_id`` (default
  ``<task>#<line>``); blank lines and lines starting with ``//`` are skipped;
* a KernelBench-style run directory: ``level<L>/problem_<N>/sample_<K>.py`` anywhere below it
  (task ``L<L>/<N>``, sample id ``L<L>/<N>/sample_<K>``);
* with ``--task T``, a directory of candidates: every ``*.py`` directly in it, scored against T
  (sample id: the file's name without ``.py``).

Results go to a JSONL file, one line per sample, written and flushed as each finishes. A run
that is killed and started again reuses a sample's row only when its candidate source, task
content and scoring options are what it would score now (``evalfarm.engineer.batch_resume``; a torn last
line is dropped). ``summarise`` makes the final table: per task and overall, success rate, fast_p
for p in {1, 1.5, 2} (the share of all samples that are correct *and* faster than p times the
reference), the geometric mean speedup of the successes, verdict counts and the most frequent
guard reasons.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from evalfarm.engineer import batch_resume
from evalfarm.engineer.batch_resume import Identity
from evalfarm.result import ScoreResult
from evalfarm.tasks.format import TaskFormatError

log = logging.getLogger(__name__)

FAST_P = (1.0, 1.5, 2.0)
_RUN_RE = re.compile(r"level(\d+)/problem_(\d+)/sample_(\d+)\.py$")


class BatchInputError(TaskFormatError):
    """The candidates file or directory cannot be read; the message names the line or path."""


@dataclasses.dataclass(frozen=True)
class BatchItem:
    """One sample to score."""

    sample_id: str
    task: str
    source: str
    path: str | None = None
    where: str = ""  # where the input named it (a JSONL line, a file), for error messages

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


# At most this many input problems are listed in one error (and how many more there were).
MAX_LISTED_PROBLEMS = 40


def read_candidates(path: str | Path, task: str | None = None,
                    check_task: Callable[[str], object] | None = None) -> list[BatchItem]:
    """The samples of a JSONL file, a KernelBench-style run directory, or (with ``task``) a
    directory of ``*.py`` candidates all scored against ``task`` (see the module doc).

    Every line and file is checked before anything is scored: ``check_task(spec)`` (when given)
    must accept each distinct task (it raises for an unknown one). All problems are listed in one
    BatchInputError."""
    p = Path(path)
    problems: list[str] = []
    if p.is_dir():
        items = _read_flat_dir(p, task, problems) if task else _read_run_dir(p, problems)
    elif p.is_file():
        items = _read_jsonl(p, task, problems)
    else:
        raise BatchInputError(f"candidates not found: {p} (a .jsonl file or a directory)")
    lines: dict[str, list[str]] = {}
    for it in items:
        lines.setdefault(it.sample_id, []).append(it.where)
    for sid, where in lines.items():
        if len(where) > 1:
            problems.append(f"sample id {sid!r} appears {len(where)} times ({', '.join(where)})")
    if check_task is not None:
        uses: dict[str, list[str]] = {}
        for it in items:
            uses.setdefault(it.task, []).append(it.where)
        for spec, where in uses.items():
            try:
                check_task(spec)
            except Exception as err:  # noqa: BLE001 - any reason a task cannot be used is a problem to list
                shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
                problems.append(f"task {spec!r} ({shown}): {str(err).splitlines()[0] if str(err) else type(err).__name__}")
    if problems:
        listed = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(listed)
        raise BatchInputError(
            f"{len(problems)} problem(s) in {p}; nothing was scored:\n" + "\n".join(f"  {x}" for x in listed)
            + (f"\n  ... and {more} more" if more else ""))
    if not items:
        hint = (" (expected level*/problem_*/sample_*.py; to score every *.py in it against one task, add "
                "--task T)" if p.is_dir() and not task else "")
        raise BatchInputError(f"no candidates in {p}{hint}")
    return items


def _read_run_dir(root: Path, problems: list[str]) -> list[BatchItem]:
    items = []
    for f in sorted(root.rglob("sample_*.py")):
        m = _RUN_RE.search(f.relative_to(root).as_posix())
        if not m:
            continue
        level, problem, sample = (int(g) for g in m.groups())
        source = _read_text(f, problems)
        if source is not None:
            items.append(BatchItem(f"L{level}/{problem}/sample_{sample}", f"L{level}/{problem}", source, str(f),
                                   str(f)))
    items.sort(key=lambda it: tuple(int(x) for x in re.findall(r"\d+", it.sample_id)))
    return items


def _read_flat_dir(root: Path, task: str, problems: list[str]) -> list[BatchItem]:
    """Every ``*.py`` directly in ``root``, scored against ``task``; the sample id is the file's name."""
    items = []
    for f in sorted(root.glob("*.py"), key=lambda f: _natural(f.name)):
        if not f.is_file():
            continue
        source = _read_text(f, problems)
        if source is not None:
            items.append(BatchItem(f.stem, task, source, str(f), str(f)))
    if not items and any(root.glob("level*/problem_*/sample_*.py")):
        problems.append(f"{root} is a run directory (level*/problem_*/sample_*.py name their tasks): leave out --task")
    return items


def _natural(name: str) -> list[object]:
    """A sort key that puts c2.py before c10.py."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _read_text(f: Path, problems: list[str], where: str = "") -> str | None:
    try:
        return f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        problems.append(f"{where}candidate file is not valid UTF-8: {f}")
    except OSError as err:
        problems.append(f"{where}cannot read candidate file {f}: {err.strerror}")
    return None


def _read_jsonl(path: Path, task: str | None, problems: list[str]) -> list[BatchItem]:
    items = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BatchInputError(f"{path} is not valid UTF-8 (expected JSONL)") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        where = f"line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not JSON: {err.msg}")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected an object with string fields 'task' and 'candidate'")
            continue
        row_task = row.get("task", task)
        if not isinstance(row_task, str) or not isinstance(row.get("candidate"), str):
            problems.append(f"{where}: expected an object with string fields 'task'"
                            f"{'' if task is None else ' (or --task)'} and 'candidate'")
            continue
        cand = row["candidate"]
        cand_path: str | None = None
        if "\n" not in cand and cand.endswith(".py"):
            f = (path.parent / cand) if not os.path.isabs(cand) else Path(cand)
            if not f.is_file():
                problems.append(f"{where}: candidate file not found: {f}")
                continue
            source = _read_text(f, problems, f"{where}: ")
            if source is None:
                continue
            cand, cand_path = source, str(f)
        sid = row.get("sample_id", f"{row_task}#{n}")
        items.append(BatchItem(str(sid), row_task, cand, cand_path, where))
    return items


# --- the results file ------------------------------------------------------------------------
def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The rows already in a results file; a torn last line (a killed run) is dropped from the file."""
    p = Path(path)
    if not p.exists():
        return []
    rows, good_bytes = [], 0
    with p.open("rb") as f:
        for raw in f:
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break
            if not raw.endswith(b"\n") or not isinstance(row, dict) or "sample_id" not in row:
                break
            rows.append(row)
            good_bytes += len(raw)
    if good_bytes < p.stat().st_size:
        log.warning("dropping a torn line at the end of %s (a run was killed while writing it)", p)
        with p.open("r+b") as f:
            f.truncate(good_bytes)
    return rows


def result_row(item: BatchItem, result: ScoreResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of the results file: the sample, its verdict and speedup, and the full result."""
    return {"sample_id": item.sample_id, "task": item.task, "candidate_path": item.path,
            "candidate_sha256": item.sha256, "verdict": result.verdict.value, "speedup": result.speedup,
            "detail": result.detail[:2000], **(extra or {}), "result": result.to_dict()}


class ResultsWriter:
    """Appends rows to the results file, each flushed and synced before the next sample counts as done."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_batch(items: Iterable[BatchItem], out: str | Path,
              score_all: Callable[[list[BatchItem]], Iterator[dict[str, Any]]],
              identity: Callable[[BatchItem], Identity], progress: bool = True,
              say: Callable[[str], None] = log.info) -> list[dict[str, Any]]:
    """Score the items whose result is not already in ``out`` as they would be scored now
    (``identity``: evalfarm.engineer.batch_resume) through ``score_all`` (which yields one row per item, in
    any order), appending each row as it comes; returns every row of ``out`` for the items.

    Interrupted (KeyboardInterrupt), it raises ``Interrupted`` saying how many results ``out``
    holds; the rows written so far stay, and the same command resumes."""
    from evalfarm.interrupt import Interrupted

    items = list(items)
    rows = read_results(out)
    resume = batch_resume.plan(items, rows, identity)
    if rows:
        say(resume.summary(len(items), out))
    batch_resume.move_superseded(out, rows, resume.superseded)
    done = dict(resume.reused)
    by_id = {it.sample_id: it for it in items}
    from tqdm import tqdm

    bar = tqdm(total=len(items), initial=len(done), desc="scoring", unit="sample",
               disable=not progress, file=None if progress else io.StringIO())
    try:
        with ResultsWriter(out) as writer:
            if resume.todo:
                for row in score_all(resume.todo):
                    row = {**row, **identity(by_id[row["sample_id"]]).fields()}
                    writer.write(row)
                    done[row["sample_id"]] = row
                    bar.update(1)
                    bar.set_postfix_str(f"{row['verdict']} {row['task']}", refresh=False)
    except KeyboardInterrupt:
        bar.close()
        raise Interrupted(f"{len(done)} of {len(items)} results in {out}; run the same command to resume") from None
    bar.close()
    return [done[it.sample_id] for it in items if it.sample_id in done]


# --- the summary -----------------------------------------------------------------------------
@dataclasses.dataclass
class SummaryRow:
    task: str
    samples: int
    success_rate: float
    fast_p: dict[float, float]
    geomean_speedup: float | None
    verdicts: dict[str, int]
    top_guards: list[tuple[str, int]]
    geomean_speedup_vs_compile: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fast_p"] = {f"fast_{p:g}": v for p, v in self.fast_p.items()}
        return d


def _guard_reasons(row: dict[str, Any]) -> list[str]:
    """The guard names behind a HACK_DETECTED verdict (or guard notes on others), for the table."""
    out = []
    if row.get("verdict") == "HACK_DETECTED":
        m = re.match(r"guard (\w+)", str(row.get("detail", "")))
        out.append(m.group(1) if m else "hack")
    return out


def _geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summarise(rows: list[dict[str, Any]]) -> list[SummaryRow]:
    """One row per task (in first-seen order) and a final "ALL" row."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_task.setdefault(str(r["task"]), []).append(r)
    out = [_summary(task, rs) for task, rs in by_task.items()]
    out.append(_summary("ALL", rows))
    return out


def _summary(task: str, rows: list[dict[str, Any]]) -> SummaryRow:
    n = len(rows)
    ok = [r for r in rows if r.get("verdict") == "OK" and isinstance(r.get("speedup"), int | float)]
    guards = Counter(g for r in rows for g in _guard_reasons(r))
    vs_compile = [r["speedup_vs_compile"] for r in ok if isinstance(r.get("speedup_vs_compile"), int | float)]
    return SummaryRow(
        task=task, samples=n, success_rate=len(ok) / n if n else 0.0,
        fast_p={p: sum(1 for r in ok if r["speedup"] > p) / n if n else 0.0 for p in FAST_P},
        geomean_speedup=_geomean([float(r["speedup"]) for r in ok]),
        verdicts=dict(Counter(str(r.get("verdict")) for r in rows).most_common()),
        top_guards=guards.most_common(3),
        geomean_speedup_vs_compile=_geomean([float(v) for v in vs_compile]),
    )


_COLUMNS = ("task", "samples", "success", "fast_1", "fast_1.5", "fast_2", "geomean", "vs_compile", "verdicts",
            "top_guards")


def _cells(s: SummaryRow) -> list[str]:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    return [s.task, str(s.samples), f"{s.success_rate:.0%}", *(f"{s.fast_p[p]:.0%}" for p in FAST_P),
            x(s.geomean_speedup), x(s.geomean_speedup_vs_compile),
            " ".join(f"{k}:{v}" for k, v in s.verdicts.items()),
            " ".join(f"{k}:{v}" for k, v in s.top_guards) or "-"]


def format_table(summary: list[SummaryRow]) -> str:
    """A plain-text table for a terminal."""
    rows = [list(_COLUMNS), *(_cells(s) for s in summary)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def format_markdown(summary: list[SummaryRow]) -> str:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(_cells(s)) + " |" for s in summary]
    return "\n".join(lines) + "\n"


def format_csv(summary: list[SummaryRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["task", "samples", "success_rate", *(f"fast_{p:g}" for p in FAST_P), "geomean_speedup",
                "geomean_speedup_vs_compile", *(f"n_{v}" for v in _all_verdicts(summary)), "top_guards"])
    for s in summary:
        w.writerow([s.task, s.samples, f"{s.success_rate:.4f}", *(f"{s.fast_p[p]:.4f}" for p in FAST_P),
                    "" if s.geomean_speedup is None else f"{s.geomean_speedup:.4f}",
                    "" if s.geomean_speedup_vs_compile is None else f"{s.geomean_speedup_vs_compile:.4f}",
                    *(s.verdicts.get(v, 0) for v in _all_verdicts(summary)),
                    ";".join(f"{k}:{v}" for k, v in s.top_guards)])
    return buf.getvalue()


def _all_verdicts(summary: list[SummaryRow]) -> list[str]:
    from evalfarm.verdict import Verdict

    return [v.value for v in Verdict]
