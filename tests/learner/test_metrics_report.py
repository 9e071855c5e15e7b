"""Tests for the metrics sink (`learner.report.metrics`) and the speedup report (`learner.report.speedups`)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import pytest

from learner.report.metrics import MetricsWriter, read_jsonl
from learner.report.speedups import (
    SpeedupSummary,
    format_markdown,
    format_table,
    summarize,
    verdict_breakdown,
    write_plot,
    write_report,
)
from learner.report.stage_notes import verdict_sentence
from learner.report.stats import bootstrap_mean, difference_of_means, paired_difference

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000  # a rendered figure, not an empty stub


# --------------------------------------------------------------------------- MetricsWriter


def test_lines_written_and_flushed_while_open(tmp_path: Path) -> None:
    mw = MetricsWriter(tmp_path, tensorboard=False)
    try:
        mw.write(1, {"loss": 0.5, "reward": 1}, stage="sft")
        # Read back before close: nothing may sit in a buffer.
        recs = read_jsonl(tmp_path / "metrics.jsonl")
        assert len(recs) == 1
        assert recs[0]["step"] == 1 and recs[0]["stage"] == "sft"
        assert recs[0]["loss"] == 0.5 and recs[0]["reward"] == 1
        assert isinstance(recs[0]["reward"], int)
        assert abs(recs[0]["time"] - time.time()) < 60

        mw.write(2, {"loss": 0.25}, stage="rl")
        recs = read_jsonl(tmp_path / "metrics.jsonl")
        assert [(r["step"], r["stage"]) for r in recs] == [(1, "sft"), (2, "rl")]
    finally:
        mw.close()


def test_nan_and_inf_become_null_and_file_is_strict_json(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(3, {"a": float("nan"), "b": float("inf"), "c": -math.inf, "d": 1.5}, stage="x")
    raw = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in raw and "Infinity" not in raw
    rec = json.loads(raw.splitlines()[0])
    assert rec["a"] is None and rec["b"] is None and rec["c"] is None
    assert rec["d"] == 1.5


def test_numpy_scalars_converted(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(
            np.int64(7),
            {
                "f32": np.float32(0.25),
                "f64": np.float64(2.5),
                "i64": np.int64(3),
                "arr0d": np.array(4.0),
                "nan32": np.float32("nan"),
                "flag": True,
            },
            stage="rl",
        )
    (rec,) = read_jsonl(tmp_path / "metrics.jsonl")
    assert rec["step"] == 7 and isinstance(rec["step"], int)
    assert rec["f32"] == 0.25 and rec["f64"] == 2.5 and rec["arr0d"] == 4.0
    assert rec["i64"] == 3 and rec["flag"] == 1
    assert rec["nan32"] is None


def test_rejects_non_numeric_and_reserved_keys(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        with pytest.raises(TypeError):
            mw.write(1, {"name": "1.5"}, stage="x")  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="reserved"):
            mw.write(1, {"step": 2}, stage="x")
    # The rejected calls wrote nothing.
    assert read_jsonl(tmp_path / "metrics.jsonl") == []


def test_write_after_close_raises(tmp_path: Path) -> None:
    mw = MetricsWriter(tmp_path, tensorboard=False)
    mw.close()
    mw.close()  # idempotent
    with pytest.raises(ValueError):
        mw.write(1, {"x": 1.0}, stage="s")


def test_append_on_reopen_keeps_earlier_lines(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(1, {"loss": 1.0}, stage="rl")
        mw.write(2, {"loss": 0.9}, stage="rl")
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(3, {"loss": 0.8}, stage="rl")
    recs = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["loss"] for r in recs] == [1.0, 0.9, 0.8]


def test_reopen_after_killed_mid_write_drops_partial_line(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(1, {"loss": 1.0}, stage="rl")
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step":2,"stage":"rl","lo')  # killed mid-write
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(2, {"loss": 0.5}, stage="rl")
    recs = read_jsonl(path)
    assert [(r["step"], r["loss"]) for r in recs] == [(1, 1.0), (2, 0.5)]


def test_reopen_keeps_complete_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step":1,"stage":"rl","loss":1.0}')  # complete, just no newline
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        mw.write(2, {"loss": 0.5}, stage="rl")
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]


def test_tensorboard_event_file_created(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX")
    with MetricsWriter(tmp_path, tensorboard=True) as mw:
        assert mw.tensorboard_enabled
        for step in range(3):
            mw.write(step, {"loss": 1.0 / (step + 1), "nan": float("nan")}, stage="sft")
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1
    assert events[0].stat().st_size > 0
    # The scalar tags are in the event file.
    assert b"sft/loss" in events[0].read_bytes()
    assert b"sft/nan" not in events[0].read_bytes()  # non-finite values only go to the JSON
    # The JSON lines are written alongside.
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 3


def test_tensorboard_disabled_creates_no_tb_dir(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as mw:
        assert not mw.tensorboard_enabled
        mw.write(0, {"x": 1.0}, stage="s")
    assert not (tmp_path / "tb").exists()


def test_read_jsonl_tolerates_truncated_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "stage": "a", "x": 1}\n\n{"step": 2, "stage": "a", "x": 2}\n{"ste')
    with caplog.at_level(logging.WARNING, logger="learner.report.metrics"):
        recs = read_jsonl(path)
    assert [r["step"] for r in recs] == [1, 2]
    assert "truncated" in caplog.text


def test_read_jsonl_rejects_corruption_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_jsonl(path)


# --------------------------------------------------------------------------- summarize


def test_summarize_hand_computed() -> None:
    s = summarize([2.0, None, 0.5, 1.0, 4.0])
    assert (s.total, s.success, s.speedup_gt_1) == (5, 4, 2)
    # The paper's figures: the failure counts as 0 -> [0, 0.5, 1, 2, 4]
    assert s.mean == pytest.approx(7.5 / 5)
    assert s.max == pytest.approx(4.0)
    assert (s.p25, s.p50, s.p75) == (pytest.approx(0.5), pytest.approx(1.0), pytest.approx(2.0))
    # Over successes: sorted [0.5, 1, 2, 4]; linear interpolation at ranks 0.75, 1.5, 2.25
    assert s.mean_ok == pytest.approx(1.875)
    assert s.p25_ok == pytest.approx(0.875)
    assert s.p50_ok == pytest.approx(1.5)
    assert s.p75_ok == pytest.approx(2.5)
    assert s.geomean_ok == pytest.approx(math.sqrt(2.0))  # (2 * 0.5 * 1 * 4) ** (1/4)
    assert s.success_rate == pytest.approx(0.8)


def test_a_stage_that_drops_its_slow_tasks_does_not_look_faster() -> None:
    solves_all = summarize([1.1, 1.2, 5.0, 6.0])
    drops_slow = summarize([None, None, 5.0, 6.0])
    assert drops_slow.mean_ok > solves_all.mean_ok  # the old, flattering view
    assert drops_slow.mean < solves_all.mean  # the headline


def test_summarize_exactly_one_is_not_a_speedup() -> None:
    s = summarize([1.0, 1.0, 1.01])
    assert s.speedup_gt_1 == 1
    assert s.p50 == pytest.approx(1.0)


def test_summarize_all_none() -> None:
    s = summarize([None, None, None])
    assert (s.total, s.success, s.speedup_gt_1) == (3, 0, 0)
    assert (s.mean, s.max, s.p50) == (0.0, 0.0, 0.0)
    assert all(v is None for v in (s.mean_ok, s.p75_ok, s.p50_ok, s.p25_ok, s.geomean_ok))


def test_summarize_empty() -> None:
    s = summarize([])
    assert (s.total, s.success, s.speedup_gt_1) == (0, 0, 0)
    assert s.mean is None and s.geomean_ok is None and s.success_rate == 0.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_summarize_rejects_impossible_speedups(bad: float) -> None:
    with pytest.raises(ValueError):
        summarize([1.0, bad])


def test_summary_to_dict_is_plain_json() -> None:
    s = summarize([np.float32(2.0), 3.0, None])
    d = s.to_dict()
    assert d == json.loads(json.dumps(d))
    assert all(type(d[k]) is float for k in ("mean", "max", "p75", "p50", "p25", "geomean_ok"))
    assert SpeedupSummary.from_dict(d) == s


# --------------------------------------------------------------------------- tables


def _rows() -> dict[str, SpeedupSummary]:
    return {
        "after SFT": summarize([2.0, None, 0.5, 1.0, 4.0]),
        "after contrastive RL": summarize([3.0, 1.5, None, 12.345, 0.9]),
        "no successes": summarize([None, None]),
    }


def test_format_table_contains_labels_and_figures() -> None:
    text = format_table(_rows(), title="level 1")
    lines = text.splitlines()
    assert lines[0] == "level 1"
    header = next(ln for ln in lines if ln.startswith("label"))
    for col in ("mean", "max", "75%", "50%", "25%", "success", ">1x"):
        assert col in header
    sft = next(ln for ln in lines if ln.startswith("after SFT"))
    assert sft.split()[2:] == ["1.50x", "4.00x", "2.00x", "1.00x", "0.50x", "4/5", "2"]
    rl = next(ln for ln in lines if ln.startswith("after contrastive RL"))
    assert "12.35x" in rl and "4/5" in rl
    none = next(ln for ln in lines if ln.startswith("no successes"))
    assert none.split()[2:] == ["0.00x"] * 5 + ["0/2", "0"]
    data = [sft, rl, none]
    assert len({ln.index("4/5") + 3 for ln in (sft, rl)}) == 1  # success column aligned
    assert all(len(ln) <= len(header) for ln in data)
    ok_only = format_table(_rows(), successes_only=True).splitlines()
    sft_ok = next(ln for ln in ok_only if ln.startswith("after SFT"))
    assert sft_ok.split()[2:] == ["1.88x", "4.00x", "2.50x", "1.50x", "0.88x", "4/5", "2"]
    none_ok = next(ln for ln in ok_only if ln.startswith("no successes"))
    assert none_ok.split()[2:] == ["-"] * 5 + ["0/2", "0"]


def test_format_markdown_has_separator_row() -> None:
    md = format_markdown({**_rows(), "a|b": summarize([1.5])}).splitlines()
    assert md[0].startswith("| label |") and "| >1x |" in md[0]
    assert md[1].replace("|", "").replace("-", "").replace(":", "") == ""
    assert md[1].count("|") == md[0].count("|") == 9
    assert any(ln.startswith("| after SFT | 1.50x | 4.00x |") for ln in md)
    assert any("a\\|b" in ln for ln in md)  # a pipe in a label does not break the table
    assert len(md) == 2 + 4


def test_verdict_breakdown_sorted_by_count() -> None:
    counts = verdict_breakdown(["OK", "INCORRECT", "OK", "COMPILE_ERROR", "OK", "INCORRECT"])
    assert list(counts.items()) == [("OK", 3), ("INCORRECT", 2), ("COMPILE_ERROR", 1)]
    assert verdict_breakdown([]) == {}


# --------------------------------------------------------------------------- plot / report


def test_write_plot_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    speedups = {
        "after SFT": [*list(2.0 ** rng.normal(0.0, 1.0, 200)), None, None],
        "after RL": list(2.0 ** rng.normal(1.0, 1.0, 200)),
        "empty": [],
    }
    verdicts = {"after SFT": ["OK"] * 200 + ["INCORRECT", "PARSE_FAILURE"], "after RL": ["OK"] * 200,
                "empty": []}
    out = write_plot(speedups, verdicts, tmp_path / "sub" / "dir" / "plot.png")
    assert out == tmp_path / "sub" / "dir" / "plot.png"
    _assert_png(out)


def test_write_plot_without_successes(tmp_path: Path) -> None:
    _assert_png(write_plot({"a": [None], "b": []}, {"a": ["TIMEOUT"]}, tmp_path / "empty.png"))
    _assert_png(write_plot({}, {}, tmp_path / "none.png"))
    _assert_png(write_plot({"one": [1.0]}, {"one": ["OK"]}, tmp_path / "one.png"))


def test_write_report_all_files_consistent(tmp_path: Path) -> None:
    speedups = {
        "after SFT": [2.0, None, 0.5, 1.0, 4.0],
        "after contrastive RL": [3.0, 1.5, None, 12.345, 0.9],
        "no successes": [None, None],
    }
    verdicts = {
        "after SFT": ["OK", "INCORRECT", "OK", "OK", "OK"],
        "after contrastive RL": ["OK", "OK", "COMPILE_ERROR", "OK", "OK"],
        "no successes": ["PARSE_FAILURE", "TIMEOUT"],
    }
    paths = write_report(tmp_path / "out" / "level1.v2", speedups, verdicts, notes_text="N-TEXT",
                         notes_md="N-MD", extra_json={"extra": 1})
    assert set(paths) == {"txt", "md", "json", "png"}
    for ext, p in paths.items():
        assert p == tmp_path / "out" / f"level1.v2.{ext}"
        assert p.is_file() and p.stat().st_size > 0

    rows = _rows()
    txt = paths["txt"].read_text()
    assert format_table(rows, title="Speedups (failures count as 0, as in the paper)") in txt
    assert format_table(rows, title="Over successful samples only", successes_only=True) in txt
    assert "INCORRECT" in txt and "COMPILE_ERROR" in txt and "20.0%" in txt and "N-TEXT" in txt

    md = paths["md"].read_text()
    assert format_markdown(rows) in md and format_markdown(rows, successes_only=True) in md
    assert "![speedup distribution and verdicts](level1.v2.png)" in md and "N-MD" in md
    assert "| label | OK | COMPILE_ERROR | INCORRECT | PARSE_FAILURE | TIMEOUT | total |" in md
    assert "| after SFT | 4 | 0 | 1 | 0 | 0 | 5 |" in md

    payload = json.loads(paths["json"].read_text())
    assert payload["summaries"] == {k: v.to_dict() for k, v in rows.items()} and payload["extra"] == 1
    assert payload["verdicts"]["after SFT"] == {"OK": 4, "INCORRECT": 1}
    for label, counts in payload["verdicts"].items():
        assert counts.get("OK", 0) == payload["summaries"][label]["success"]
        assert sum(counts.values()) == payload["summaries"][label]["total"]
    _assert_png(paths["png"])


def test_write_report_without_verdicts(tmp_path: Path) -> None:
    paths = write_report(tmp_path / "r", {"only": [1.2, None]})
    assert "verdicts" not in paths["txt"].read_text()
    assert json.loads(paths["json"].read_text())["verdicts"] == {}
    _assert_png(paths["png"])


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_mean_covers_the_truth_and_narrows_with_more_cells() -> None:
    rng = np.random.default_rng(3)
    small = bootstrap_mean(rng.normal(1.0, 1.0, 20), seed=1)
    large = bootstrap_mean(rng.normal(1.0, 1.0, 2000), seed=1)
    assert small.low < small.estimate < small.high and small.cells == 20
    assert large.low < 1.0 < large.high
    assert (large.high - large.low) < (small.high - small.low) / 5
    assert bootstrap_mean([2.0, 2.0, 2.0]).format().startswith("+2.000 [+2.000, +2.000]")
    assert bootstrap_mean([]).cells == 0 and "no cells" in bootstrap_mean([]).format()
    one = bootstrap_mean([0.5])  # one cell resamples to itself: no evidence, whatever its sign
    assert not one.excludes_zero and "one cell: no interval" in one.format()


def test_stage_sentence_claims_a_move_only_with_an_interval() -> None:
    up = paired_difference({i: 2.0 + 0.1 * i for i in range(6)}, {i: 1.0 for i in range(6)})
    assert "this stage raised the mean speedup" in verdict_sentence("SFT", "RL", up)
    single = paired_difference({"L1/8": 0.6}, {"L1/8": 0.9})
    assert "one task cannot tell a change from noise" in verdict_sentence("SFT", "RL", single)
    assert "lowered" not in verdict_sentence("SFT", "RL", single)


def test_paired_difference_uses_shared_cells_only() -> None:
    before = {("L1/1", 0): 1.0, ("L1/2", 0): 2.0, ("L1/4", 0): 3.0}
    after = {("L1/1", 0): 2.0, ("L1/2", 0): 3.0, ("L2/6", 0): 9.0}
    d = paired_difference(after, before)
    assert d.cells == 2 and d.estimate == pytest.approx(1.0) and d.excludes_zero
    noise = paired_difference({i: float(i % 2) for i in range(40)}, {i: float((i + 1) % 2) for i in range(40)})
    assert not noise.excludes_zero
    gap = difference_of_means([1.0, 1.2, 0.8] * 10, [0.0, 0.2, -0.2] * 10)
    assert gap.estimate == pytest.approx(1.0) and gap.excludes_zero
