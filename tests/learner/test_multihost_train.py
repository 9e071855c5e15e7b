"""`learner train` as 2 and 4 CPU processes of one `jax.distributed` job on loopback, end to end
with a real local farm daemon: SFT, one self-supervised round and one RL step of a small demo
config. Each run's exemplar database equals a one-process run's on the same mesh (one process
with as many devices), row for row, and its checkpoints equal that run's within floating-point
reduction order (docs/training.md, "Several processes"). A process killed during RL stops the
others with an error, and one process then resumes the run from the two-process checkpoint.

The farm scores equal code equally here because every run shares one result cache and
re-verification of outliers is off (`farm.options.reverify_above=0`): a re-measured score is a
new measurement, which no two runs share.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from loopback_job import free_port, process_env

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "scripts" / "learner_processes.sh"

SFT_STEPS = 60
OVERRIDES = [
    "--config.tasks.ids=L1/1,L2/6",
    "--config.tasks.heldout=",
    "--config.tasks.programs=fast",
    f"--config.sft.steps={SFT_STEPS}",
    "--config.sft.decay_steps=20",
    "--config.sft.batch_size=4",
    "--config.selfsup.rounds=1",
    "--config.selfsup.samples_per_task=2",
    "--config.selfsup.passes=1",
    "--config.selfsup.batch_size=4",
    "--config.rl.steps=1",
    "--config.rl.tasks_per_step=2",
    "--config.rl.group_size=2",
    "--config.sampling.batch_size=4",
    "--config.sampling.max_new_tokens=192",
    "--config.sampling.temperature=0.5",  # after 60 SFT steps most samples parse at 0.5
    "--config.eval.samples_per_task=1",
    "--config.eval.prompts=plain",
    "--config.eval.temperature=0.5",
    "--config.farm.options.num_correctness_inputs=10",
    "--config.farm.options.timing_budget_s=0.5",
    "--config.farm.options.reverify_above=0",
    "--config.checkpoint_every=1",
    "--config.progress=False",
]
COLUMNS = ("sample_id, task_id, code, verdict, speedup, reward, policy_version, step, stage, "
           "prompt_version, detail")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A farm result cache and a JAX compilation cache shared by every run of this module."""
    root = tmp_path_factory.mktemp("multihost-shared")
    return {"farm": root / "farm-cache", "jax": root / "jax-cache"}


def _args(workdir: Path, shared: dict[str, Path], *extra: str) -> list[str]:
    return ["train", "--config", str(REPO / "configs" / "demo.py"), f"--config.workdir={workdir}", *OVERRIDES,
            f"--config.farm.local_cache_dir={shared['farm']}", f"--config.jax_cache_dir={shared['jax']}", *extra]


def _env(devices: int = 1, **more: str) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **more)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for k in ("LEARNER_COORDINATOR_ADDRESS", "LEARNER_NUM_PROCESSES", "LEARNER_PROCESS_ID",
              "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        if k not in more:
            env.pop(k, None)
    return env


def _one_process(workdir: Path, shared: dict[str, Path], devices: int, *extra: str) -> str:
    res = subprocess.run([sys.executable, "-m", "learner", *_args(workdir, shared, *extra)], cwd=REPO,
                         env=_env(devices), capture_output=True, text=True, timeout=1200)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    return out


def _processes(n: int, workdir: Path, shared: dict[str, Path], logs: Path, *extra: str) -> list[subprocess.Popen]:
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for pid in range(n):
        env = process_env(port, n, pid, _env(1))
        with open(logs / f"process-{pid}.log", "w") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "learner", *_args(workdir, shared, *extra)],
                                          cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def _rows(workdir: Path, name: str = "exemplars.sqlite") -> list[tuple]:
    db = sqlite3.connect(workdir / name)
    try:
        return db.execute(f"SELECT {COLUMNS} FROM samples ORDER BY sample_id").fetchall()  # noqa: S608
    finally:
        db.close()


def _metrics(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _params(ckpt: Path) -> dict[str, np.ndarray]:
    """The arrays of a stage checkpoint's latest step, as host arrays on one device."""
    import orbax.checkpoint as ocp

    step = max(int(p.name) for p in ckpt.iterdir() if p.name.isdigit())
    path = ckpt / str(step) / "default"
    ck = ocp.StandardCheckpointer()
    meta = ck.metadata(path)
    meta = getattr(meta, "item_metadata", meta)
    meta = getattr(meta, "tree", meta)
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), meta)
    items = ck.restore(path, target)
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(items)}


def _assert_same_run(multi: Path, single: Path) -> None:
    """Equal databases row for row; equal steps and keys; params equal within reduction order."""
    rows, ref = _rows(multi), _rows(single)
    assert rows == ref
    stages = {r[8] for r in rows}
    assert {"sft", "selfsup", "rl"} <= stages
    # farm outcomes crossed processes: some sampled code was scored OK (RL's may all fail to parse)
    assert any(r[8] in ("selfsup", "rl") and r[3] == "OK" for r in rows), "no sample was scored OK"
    assert _rows(multi, "eval.sqlite") == _rows(single, "eval.sqlite")
    for stage in ("sft", "selfsup", "rl"):
        got, want = _params(multi / "ckpt" / stage), _params(single / "ckpt" / stage)
        assert got.keys() == want.keys()
        for key, w in want.items():
            g = got[key]
            assert g.shape == w.shape and g.dtype == w.dtype, key
            if "params" not in key and "opt_state" not in key:  # step, rng: exactly
                np.testing.assert_array_equal(g, w, err_msg=f"{stage} {key}")
                continue
            diff = np.linalg.norm((g - w).astype(np.float64).ravel())
            scale = max(np.linalg.norm(w.astype(np.float64).ravel()), 1e-6)
            assert diff <= 1e-2 * scale, f"{stage} {key}: |diff| {diff:.3g} vs |ref| {scale:.3g}"
    # process 0 alone wrote metrics: one line per step, none twice
    steps = [(m["stage"], m["step"]) for m in _metrics(multi)]
    assert len(steps) == len(set(steps)) and steps == [(m["stage"], m["step"]) for m in _metrics(single)]
    for suffix in ("txt", "md", "json", "png"):
        assert (multi / f"report.{suffix}").stat().st_size > 0


def _wait_all(procs: list[subprocess.Popen], logs: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    texts = [f.read_text()[-3000:] for f in sorted(logs.glob("process-*.log"))]
    assert all(p.returncode == 0 for p in procs), "\n-----\n".join(texts)


@pytest.mark.long  # a one-process and a two-process run of the learner with a local farm: ~6 min on 2 cores
@pytest.mark.timeout(2400)
def test_two_processes_equal_one_process_on_the_same_mesh(tmp_path: Path, shared: dict[str, Path]) -> None:
    _one_process(tmp_path / "one", shared, 2)
    procs = _processes(2, tmp_path / "two", shared, tmp_path / "logs")
    _wait_all(procs, tmp_path / "logs", 1200)
    _assert_same_run(tmp_path / "two", tmp_path / "one")
    p0, p1 = ((tmp_path / "logs" / f"process-{i}.log").read_text() for i in range(2))
    assert "process 0 of 2 (the controller" in p0 and "process 1 of 2" in p1
    # only the controller talked to the farm and printed the tables
    assert "learner.rl.farm" in p0 and "learner.rl.farm" not in p1
    assert "report:" in p0 and "report:" not in p1


@pytest.mark.long  # a one-process run on 4 devices and 4 processes through the launcher: ~10 min on 2 cores
@pytest.mark.timeout(3000)
def test_four_processes_through_the_launcher_equal_one_process(tmp_path: Path, shared: dict[str, Path]) -> None:
    _one_process(tmp_path / "one", shared, 4)
    logs = tmp_path / "logs"
    res = subprocess.run(["bash", str(LAUNCHER), "4", *_args(tmp_path / "four", shared)], cwd=REPO,
                         env=_env(1, PYTHON=sys.executable, LEARNER_LOG_DIR=str(logs)),
                         capture_output=True, text=True, timeout=1800)
    others = "\n-----\n".join(f.read_text()[-2000:] for f in sorted(logs.glob("process-*.log")))
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:] + others
    assert "process 0 of 4 (the controller" in res.stderr
    assert sorted(f.name for f in logs.glob("process-*.log")) == [f"process-{i}.log" for i in (1, 2, 3)]
    _assert_same_run(tmp_path / "four", tmp_path / "one")


@pytest.mark.long  # two processes up to RL, a kill, and a one-process resume: ~6 min on 2 cores
@pytest.mark.timeout(2400)
def test_a_killed_process_stops_the_other_and_one_process_resumes(tmp_path: Path, shared: dict[str, Path]) -> None:
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    extra = ("--config.rl.steps=4", "--config.distributed.heartbeat_timeout_s=20")
    procs = _processes(2, workdir, shared, logs, *extra)
    offset = SFT_STEPS + 1
    try:
        deadline = time.monotonic() + 1200
        ckpt = workdir / "ckpt" / "rl"
        saved: list[Path] = []
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            saved = [p for p in ckpt.iterdir() if p.name.isdigit()] if ckpt.is_dir() else []  # committed steps
            if saved:
                break
            time.sleep(0.5)
        assert all(p.poll() is None for p in procs), (logs / "process-0.log").read_text()[-4000:]
        assert saved, "RL saved no checkpoint in time"
        os.killpg(procs[1].pid, signal.SIGKILL)  # process 1 dies in the middle of RL
        killed = time.monotonic()
        rc = procs[0].wait(180)
        stopped_after = time.monotonic() - killed
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    out0 = (logs / "process-0.log").read_text()
    assert rc != 0, out0[-3000:]
    assert stopped_after < 120, f"process 0 took {stopped_after:.0f} s to stop"
    assert re.search(r"another task died|process 0 of 2 stops: ", out0), out0[-3000:]

    # every process restarted (here: one process instead of two) resumes from the last checkpoint
    out = _one_process(workdir, shared, 1, *extra)
    assert "stage sft already complete" in out and "stage selfsup already complete" in out
    resumed = re.search(r"stage rl: step (\d) of 4", out)
    assert resumed and 1 <= int(resumed.group(1)) <= 3, out[-4000:]
    rows = _rows(workdir)
    per_step: dict[int, int] = {}
    for r in rows:
        if r[8] == "rl":
            per_step[r[7]] = per_step.get(r[7], 0) + 1
    assert per_step == {offset + i: 4 for i in range(1, 5)}, per_step  # the database matches the weights
    assert len({r[0] for r in rows}) == len(rows)
    rl_steps = [m["step"] for m in _metrics(workdir) if m["stage"] == "rl"]
    assert set(rl_steps) == {offset + i for i in range(1, 5)}
    assert (workdir / "report.txt").stat().st_size > 0
