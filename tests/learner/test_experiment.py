"""The speed-mixture experiment: its statistics on known inputs, and (slow) the CI-sized run
end to end on CPU with real farm daemons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from learner.experiment import ARMS, collect, evidence, experiment_report
from learner.report.stage_notes import cells, program_class, program_shares, stage_moves

REPO = Path(__file__).resolve().parents[2]
TASKS = ["L1/1", "L1/2", "L1/4", "L2/6"]
HELDOUT = ["L1/8"]
SPEED = {"fast": 3.0, "reference": 1.0, "slowed": 0.5}


def _samples(rng: np.random.Generator, p_fast: float, seed: int, n: int = 6, held_p_fast: float = 0.0) -> list[dict]:
    out = []
    for task in TASKS + HELDOUT:
        p = held_p_fast if task in HELDOUT else p_fast
        for _ in range(n):
            kind = "fast" if rng.random() < p else str(rng.choice(["reference", "slowed", "wrong"]))
            ok = kind != "wrong"
            out.append(dict(task=task, verdict="OK" if ok else "INCORRECT",
                            speedup=SPEED[kind] if ok else None, program=f"{kind}:x" if kind in ("fast", "wrong")
                            else kind, heldout=task in HELDOUT, seed=seed))
    return out


def _write(path: Path, label: str, plain: list[dict], exemplars: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"label": label, "forms": {"plain": {"samples": plain},
                                                          "exemplars": {"samples": exemplars}}}))


def _fake_experiment(root: Path, seeds: list[int], rl_fast: float, held_fast: dict[str, float]) -> None:
    rng = np.random.default_rng(0)
    _write(root / "base" / "eval" / "sft.json", "after SFT", _samples(rng, 0.25, 0), _samples(rng, 0.25, 0))
    for s in seeds:
        _write(root / "selfsup" / f"seed{s}" / "eval" / "selfsup.json", "after self-supervised",
               _samples(rng, 0.25, s), _samples(rng, 0.25, s))
        for arm in ARMS:
            _write(root / arm / f"seed{s}" / "eval" / "rl.json", ARMS[arm], _samples(rng, rl_fast, s),
                   _samples(rng, rl_fast, s, held_p_fast=held_fast[arm]))


def test_program_classes_and_cells():
    assert program_class("fast:row_scale") == "fast" and program_class("new:1a2b3c4d") == "new"
    assert program_class("unparsed") == "unparsed" and program_class("reference") == "reference"
    smp = [dict(task="a", speedup=2.0, program="fast:x"), dict(task="a", speedup=None, program="unparsed"),
           dict(task="b", speedup=1.0, program="reference")]
    assert cells(smp, seed=0) == {("a", 0): 1.0, ("b", 0): 1.0}
    assert cells(smp, "fast", seed=0) == {("a", 0): 0.5, ("b", 0): 0.0}
    sh = program_shares(smp)
    assert sh["fast"] == pytest.approx(1 / 3) and sh["unparsed"] == pytest.approx(1 / 3)
    moves = stage_moves({"before": smp, "after": [dict(s, speedup=4.0, program="fast:x") for s in smp]})
    assert moves[0][:2] == ("before", "after") and moves[0][2].estimate == pytest.approx(3.0)


def test_evidence_sees_a_real_effect_and_reports_none_when_there_is_none(tmp_path):
    seeds = [0, 1, 2]
    _fake_experiment(tmp_path / "yes", seeds, rl_fast=0.9, held_fast={"grpo": 0.0, "random": 0.4, "bucket": 0.8})
    ev = evidence(collect(tmp_path / "yes", list(ARMS), seeds), list(ARMS))
    for key, d in ev["rl_vs_selfsup"].items():
        assert d.excludes_zero and d.estimate > 0 and d.cells == len(TASKS) * len(seeds), key
    assert ev["heldout_fast_vs_grpo"]["bucket"].excludes_zero
    assert ev["heldout_fast_vs_grpo"]["bucket"].estimate > ev["heldout_fast_vs_grpo"]["random"].estimate

    _fake_experiment(tmp_path / "no", seeds, rl_fast=0.25, held_fast={"grpo": 0.0, "random": 0.0, "bucket": 0.0})
    paths = experiment_report(tmp_path / "no", list(ARMS), seeds)
    text = paths["txt"].read_text()
    assert "not every RL arm beats the self-supervised checkpoint" in text
    assert "bucket, seed 2" in text and "Programs emitted (frozen exemplars; held-out tasks)" in text
    payload = json.loads(paths["json"].read_text())
    assert set(payload["evidence"]) == {"rl_vs_selfsup", "fast_share_vs_selfsup", "heldout_fast_vs_grpo"}
    assert "contrastive RL, bucket exemplars | frozen exemplars" in payload["summaries"]
    assert "![speedup distribution and verdicts](report.png)" in paths["md"].read_text()


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(1560)  # its subprocess's own bound plus a minute: 10-15 minutes on 2 cores
def test_ci_sized_experiment_end_to_end(tmp_path):
    """configs/speed_mixture.py with experiment.short: base (SFT + self-supervised), then every
    arm for one seed, on real local farm daemons; the report answers both questions."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = [sys.executable, "-m", "learner", "experiment", "--config", str(REPO / "configs" / "speed_mixture.py"),
           "--config.experiment.short=True", f"--config.workdir={tmp_path / 'exp'}"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    root = tmp_path / "exp"
    frozen = json.loads((root / "base" / "eval_exemplars.json").read_text())
    assert set(frozen) == {"L1/2", "L2/6", "L1/8"}
    assert all([e["program"].split(":")[0] for e in v] == ["slowed", "fast"] for v in frozen.values())
    for arm in ARMS:  # every arm evaluated under the base run's frozen exemplars
        assert json.loads((root / arm / "seed0" / "eval_exemplars.json").read_text()) == frozen
        assert (root / arm / "seed0" / "eval" / "rl.json").is_file()
    payload = json.loads((root / "report.json").read_text())
    assert len(payload["evidence"]["rl_vs_selfsup"]) == 2 * len(ARMS)
    assert "Does RL work?" in (root / "report.txt").read_text()
    # the held-out task never took part in RL
    import sqlite3

    db = sqlite3.connect(root / "bucket" / "seed0" / "exemplars.sqlite")
    rl_tasks = {r[0] for r in db.execute("SELECT DISTINCT task_id FROM samples WHERE stage = 'rl'")}
    db.close()
    assert rl_tasks and "L1/8" not in rl_tasks
