"""learner.bench.run_steps: finished runs' RL step phases side by side, and their databases compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learner.bench.run_steps import compare_rows, database_rows, main, rl_steps
from learner.rl.exemplars import ExemplarDB, SampleRecord


def _workdir(root: Path, name: str, step_seconds: list[float], samples: list[SampleRecord]) -> Path:
    w = root / name
    w.mkdir()
    lines = [{"stage": "sft", "step": 1, "loss": 1.0}]
    lines += [{"stage": "rl", "step": 10 + i, "step_s": s, "generate_s": s / 4, "farm_wait_s": s / 2,
               "reference_s": 0.1, "update_s": 0.2} for i, s in enumerate(step_seconds)]
    (w / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with ExemplarDB(w / "exemplars.sqlite") as db:
        db.add_many(samples)
    return w


def _sample(i: int, speedup: float | None = 1.5, verdict: str = "OK") -> SampleRecord:
    return SampleRecord(sample_id=f"s{i}", task_id="L1/1", code=f"code {i}", verdict=verdict, speedup=speedup,
                        reward=speedup or 0.0, policy_version=0, step=10, stage="rl")


def test_rl_steps_keep_the_first_step_apart_and_take_medians(tmp_path: Path) -> None:
    w = _workdir(tmp_path, "a", [30.0, 4.0, 6.0, 5.0], [])
    r = rl_steps("a", w)
    assert r.steps == 4
    assert r.first["step_s"] == 30.0
    assert r.median["step_s"] == 5.0 and r.median["farm_wait_s"] == 2.5 and r.median["update_s"] == 0.2


def test_databases_compare_row_by_row(tmp_path: Path) -> None:
    a = _workdir(tmp_path, "a", [1.0], [_sample(1), _sample(2), _sample(3)])
    b = _workdir(tmp_path, "b", [1.0], [_sample(1), _sample(2, speedup=2.0), _sample(4, None, "INCORRECT")])
    c = compare_rows(database_rows(b), database_rows(a))
    assert (c.equal, c.different, c.only_here, c.only_there) == (1, 1, 1, 1)
    assert c.differences == (("s2", ("speedup", "reward")),)
    same = compare_rows(database_rows(a), database_rows(a))
    assert (same.equal, same.different, same.only_here, same.only_there) == (3, 0, 0, 0)


def test_cli_prints_the_table_and_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _workdir(tmp_path, "a", [20.0, 3.0], [_sample(1)])
    b = _workdir(tmp_path, "b", [25.0, 4.0], [_sample(1)])
    assert main([f"two={a}", f"one={b}"]) == 0
    out = capsys.readouterr().out
    assert "| two | 2 | 3.00 (first 20.00) |" in out
    assert "| one | 2 | 4.00 (first 25.00) |" in out
    assert "one: 1 equal, 0 different, 0 only in one, 0 only in two" in out


def test_cli_names_a_missing_workdir_and_a_malformed_argument(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no metrics"):
        main([f"x={tmp_path / 'nowhere'}"])
    with pytest.raises(SystemExit):
        main(["no-equals-sign"])
