"""Exemplar database, contrastive sampling statistics and the `learner exemplars` CLI."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sqlite3
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from learner import exemplars_cli
from learner.rl.exemplars import (
    SCHEMA_VERSION,
    Bucket,
    ExemplarDB,
    ExemplarDBError,
    SampleRecord,
    code_sha256,
    sample_from_buckets,
    sample_random_exemplars,
)
from learner.rl.prompts import Exemplar

TASK = "level1/1_NewGELU"


def code(tag: str) -> str:
    return f"class ModelNew:\n    tag = {tag!r}\n"


_ids = itertools.count()


def rec(
    task: str = TASK,
    src: str | None = None,
    speedup: float | None = 1.0,
    *,
    verdict: str | None = None,
    step: int = 0,
    stage: str = "rl",
    sample_id: str | None = None,
) -> SampleRecord:
    verdict = verdict or ("OK" if speedup is not None else "INCORRECT")
    return SampleRecord(
        sample_id=sample_id or f"s{next(_ids)}",
        task_id=task,
        code=src if src is not None else code(f"c{next(_ids)}"),
        verdict=verdict,
        speedup=speedup,
        reward=0.0 if speedup is None else speedup,
        policy_version=step,
        step=step,
        stage=stage,
        prompt_version="v1",
    )


@pytest.fixture()
def db() -> ExemplarDB:
    with ExemplarDB(":memory:") as d:
        yield d


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


def test_add_dedupes_by_sample_id(db: ExemplarDB) -> None:
    r = rec(sample_id="a", speedup=1.5)
    assert db.add(r) is True
    assert db.add(r) is False
    assert db.add(rec(sample_id="a", speedup=3.0)) is False  # same id, other content: ignored
    assert db.counts() == {"OK": 1}
    assert db.records()[0].speedup == 1.5

    batch = [rec(sample_id="a"), rec(sample_id="b"), rec(sample_id="c"), rec(sample_id="b")]
    assert db.add_many(batch) == 2
    assert [r.sample_id for r in db.records()] == ["a", "b", "c"]
    assert db.add_many([]) == 0


def test_created_is_filled_and_kept(db: ExemplarDB) -> None:
    db.add(rec(sample_id="now"))
    db.add(SampleRecord("then", TASK, "", "PARSE_FAILURE", None, 0.0, 0, 0, "rl", created=123.5))
    by_id = {r.sample_id: r for r in db.records()}
    assert by_id["now"].created > 1.6e9
    assert by_id["then"].created == 123.5


def test_record_validation() -> None:
    with pytest.raises(ValueError, match="unknown verdict"):
        rec(verdict="FAST")
    with pytest.raises(ValueError, match="only recorded for verdict OK"):
        rec(speedup=1.2, verdict="INCORRECT")
    with pytest.raises(ValueError, match="finite and > 0"):
        rec(speedup=float("inf"))
    with pytest.raises(ValueError, match="sample_id"):
        SampleRecord("", TASK, "", "PARSE_FAILURE", None, None, 0, 0, "rl")
    # Every evalfarm verdict, PARSE_FAILURE and the farm client's LOST are accepted.
    for verdict in ("INCORRECT", "COMPILE_ERROR", "RUNTIME_ERROR", "TIMEOUT", "HACK_DETECTED",
                    "INFRA_ERROR", "PARSE_FAILURE", "LOAD_ERROR", "CUDA_FAULT", "LOST"):  # fmt: skip
        assert rec(speedup=None, verdict=verdict).verdict == verdict


def test_queries(db: ExemplarDB) -> None:
    db.add_many([
        rec("b/task", code("x"), 1.2, step=1, stage="sft"),
        rec("b/task", "", None, verdict="PARSE_FAILURE", step=2),
        rec("a/task", code("y"), None, verdict="TIMEOUT", step=3),
        rec("a/task", code("z"), 2.0, step=4),
    ])  # fmt: skip
    assert db.tasks() == ["a/task", "b/task"]
    assert db.counts() == {"OK": 2, "PARSE_FAILURE": 1, "TIMEOUT": 1}
    assert db.counts("b/task") == {"OK": 1, "PARSE_FAILURE": 1}
    assert [r.step for r in db.records("b/task")] == [1, 2]
    assert [r.step for r in db.records(stage="rl")] == [2, 3, 4]
    assert [r.step for r in db.records("b/task", stage="sft")] == [1]
    assert db.max_step() == 4


def test_best_distinct_codes_highest_first(db: ExemplarDB) -> None:
    db.add_many([
        rec(TASK, code("a"), 1.1), rec(TASK, code("a") + "\n\n", 1.9),  # same code (stripped)
        rec(TASK, code("b"), 1.5), rec(TASK, code("c"), 3.0, verdict="OK"),
        rec(TASK, code("d"), None, verdict="INCORRECT"),
        rec("other", code("a"), 5.0),
    ])  # fmt: skip
    best = db.best(TASK)
    assert [r.speedup for r in best] == [3.0, 1.9, 1.5]
    assert len({code_sha256(r.code) for r in best}) == 3
    assert [r.speedup for r in db.best(TASK, k=2)] == [3.0, 1.9]
    # Across tasks, the same code counts once per task.
    assert [(r.task_id, r.speedup) for r in db.best(None, k=2)] == [("other", 5.0), (TASK, 3.0)]
    assert db.best(None, k=0) == []


def test_truncate_after(db: ExemplarDB) -> None:
    db.add_many([rec(step=s, sample_id=f"step{s}") for s in range(6)])
    assert db.truncate_after(3) == 2
    assert db.max_step() == 3
    assert sorted(r.step for r in db.records()) == [0, 1, 2, 3]
    assert db.truncate_after(3) == 0
    # The removed samples can be re-added by the resumed run.
    assert db.add(rec(step=4, sample_id="step4")) is True
    assert db.truncate_after(-1) == 5
    assert db.max_step() is None


def test_persistence_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "ex.sqlite"
    records = [rec(TASK, code("p"), 1.25, step=1), rec(TASK, "", None, verdict="PARSE_FAILURE")]
    with ExemplarDB(path) as d:
        assert d.add_many(records) == 2
    assert path.is_file()
    with ExemplarDB(path) as d:
        stored = d.records()
        assert [dataclasses.replace(r, created=0.0) for r in stored] == records
        assert all(r.created > 0 for r in stored)
        assert d.add(records[0]) is False  # dedupe survives the reopen
        assert [b.mean_speedup for b in d.buckets(TASK)] == [1.25]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        indexed = {r[1] for r in conn.execute("PRAGMA index_list(samples)")}
        index_cols = {
            name: tuple(c[2] for c in conn.execute(f"PRAGMA index_info({name})"))
            for name in indexed
        }
        assert ("task_id",) in index_cols.values()
        assert ("task_id", "verdict") in index_cols.values()
        sha = conn.execute("SELECT code_sha256 FROM samples WHERE speedup = 1.25").fetchone()[0]
        assert sha == code_sha256(code("p"))
    finally:
        conn.close()


def test_schema_version_mismatch_and_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "ex.sqlite"
    ExemplarDB(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(ExemplarDBError, match="schema version 999"):
        ExemplarDB(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ExemplarDBError, match="cannot open"):
        ExemplarDB(junk)


def test_closed_db_raises(tmp_path: Path) -> None:
    d = ExemplarDB(tmp_path / "x.sqlite")
    d.close()
    d.close()  # idempotent
    with pytest.raises(ExemplarDBError, match="closed"):
        d.records()


def test_concurrent_adds_from_threads(tmp_path: Path) -> None:
    d = ExemplarDB(tmp_path / "t.sqlite")
    added: list[int] = []

    def worker(k: int) -> None:
        # Half the ids overlap between workers: each id must be counted exactly once.
        added.append(d.add_many(rec(sample_id=f"id{(k * 50 + i) % 200}") for i in range(100)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(added) == 200
    assert len(d.records()) == 200
    d.close()


# ---------------------------------------------------------------------------------------------
# Buckets
# ---------------------------------------------------------------------------------------------


def test_buckets_distinct_codes_and_means(db: ExemplarDB) -> None:
    db.add_many([
        rec(TASK, code("a"), 1.02), rec(TASK, "  " + code("a"), 1.08),  # one code, mean 1.05
        rec(TASK, code("b"), 1.01),
        rec(TASK, code("c"), 1.5),
        rec(TASK, code("d"), None, verdict="INCORRECT"),
        rec(TASK, code("e"), None, verdict="OK"),  # OK without a timing: not an exemplar
        rec(TASK, code("f"), 0.3),  # 0.3 / 0.1 is 2.9999999999999996 in floating point
        rec("other/task", code("g"), 1.03),
    ])  # fmt: skip
    buckets = db.buckets(TASK)
    assert [b.index for b in buckets] == [3, 10, 15]
    b10 = buckets[1]
    assert [m.speedup for m in b10.members] == pytest.approx([1.01, 1.05])
    assert b10.members[1].code == code("a")  # first stored text of the code
    assert b10.mean_speedup == pytest.approx((1.01 + 1.05) / 2)
    assert buckets[2].mean_speedup == pytest.approx(1.5)
    assert sum(len(b.members) for b in buckets) == 4
    assert db.buckets("missing") == []

    with ExemplarDB(":memory:", bucket_width=0.5) as wide:
        wide.add_many(db.records())
        assert [(b.index, len(b.members)) for b in wide.buckets(TASK)] == [(0, 1), (2, 2), (3, 1)]


# ---------------------------------------------------------------------------------------------
# Sampling statistics
# ---------------------------------------------------------------------------------------------

# Four buckets (width 0.1) with known means; two of them hold two codes each.
STAT_SPEEDUPS = {
    "a1": 1.01, "a2": 1.05,  # bucket 10, mean 1.03
    "b1": 1.26,              # bucket 12, mean 1.26
    "c1": 1.52, "c2": 1.58,  # bucket 15, mean 1.55
    "d1": 2.04,              # bucket 20, mean 2.04
}  # fmt: skip
STAT_BUCKETS = {"a1": 10, "a2": 10, "b1": 12, "c1": 15, "c2": 15, "d1": 20}
BUCKET_MEANS = {10: 1.03, 12: 1.26, 15: 1.55, 20: 2.04}
TAU = 0.3
DRAWS = 20_000


def _softmax_probs(tau: float) -> dict[int, float]:
    idx = sorted(BUCKET_MEANS)
    mu = [BUCKET_MEANS[i] for i in idx]
    mu_bar = sum(mu) / len(mu)
    w = [math.exp((m - mu_bar) / tau) for m in mu]
    return {i: wi / sum(w) for i, wi in zip(idx, w, strict=True)}


def _within(freq: float, p: float, n: int, sigmas: float = 5.0) -> bool:
    return abs(freq - p) <= sigmas * math.sqrt(p * (1 - p) / n)


@pytest.fixture()
def stat_db() -> ExemplarDB:
    with ExemplarDB(":memory:") as d:
        d.add_many(rec(TASK, code(tag), s) for tag, s in STAT_SPEEDUPS.items())
        d.add_many([rec(TASK, code("x"), None, verdict="INCORRECT"), rec("other", code("y"), 9.0)])
        assert [(b.index, round(b.mean_speedup, 6)) for b in d.buckets(TASK)] == [
            (i, m) for i, m in BUCKET_MEANS.items()
        ]
        yield d


_TAG_OF_CODE = {code(t): t for t in STAT_SPEEDUPS}


def _tag(ex: Exemplar) -> str:
    return _TAG_OF_CODE[ex.code]


def test_single_draw_frequencies_match_softmax(stat_db: ExemplarDB) -> None:
    rng = np.random.default_rng(1234)
    bucket_hits: Counter[int] = Counter()
    code_hits: Counter[str] = Counter()
    for _ in range(DRAWS):
        (ex,) = stat_db.sample_exemplars(TASK, 1, TAU, rng)
        tag = _tag(ex)
        assert ex.speedup == STAT_SPEEDUPS[tag]  # a single measurement: its mean is itself
        code_hits[tag] += 1
        bucket_hits[STAT_BUCKETS[tag]] += 1
    expected = _softmax_probs(TAU)
    # The formula is far from uniform, so agreement is informative.
    assert max(abs(p - 0.25) for p in expected.values()) > 0.2
    for idx, p in expected.items():
        freq = bucket_hits[idx] / DRAWS
        assert _within(freq, p, DRAWS), (idx, freq, p)
    # Inside a bucket, each code is equally likely.
    for tag, idx in STAT_BUCKETS.items():
        members = sum(1 for t in STAT_BUCKETS if STAT_BUCKETS[t] == idx)
        p = expected[idx] / members
        assert _within(code_hits[tag] / DRAWS, p, DRAWS), (tag, code_hits[tag] / DRAWS, p)


def test_low_temperature_concentrates_on_fastest_bucket(stat_db: ExemplarDB) -> None:
    rng = np.random.default_rng(7)
    draws = [stat_db.sample_exemplars(TASK, 1, 1e-4, rng)[0] for _ in range(200)]
    assert {_tag(e) for e in draws} == {"d1"}
    # With tau tiny the second draw must still work (weights renormalised in log space).
    pairs = [stat_db.sample_exemplars(TASK, 2, 1e-4, rng) for _ in range(50)]
    assert {tuple(_tag(e) for e in pair) for pair in pairs} <= {("c1", "d1"), ("c2", "d1")}


def test_pair_frequencies_match_sampling_without_replacement(stat_db: ExemplarDB) -> None:
    p = _softmax_probs(TAU)
    # P({i, j}) = p_i * p_j / (1 - p_i) + p_j * p_i / (1 - p_j): either order of the two draws.
    expected = {
        (i, j): p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j])
        for i, j in itertools.combinations(sorted(p), 2)
    }
    assert sum(expected.values()) == pytest.approx(1.0)
    rng = np.random.default_rng(99)
    hits: Counter[tuple[int, int]] = Counter()
    for _ in range(DRAWS):
        pair = stat_db.sample_exemplars(TASK, 2, TAU, rng)
        assert len(pair) == 2
        assert pair[0].speedup <= pair[1].speedup  # increasing speedup
        buckets = tuple(STAT_BUCKETS[_tag(e)] for e in pair)
        assert buckets[0] != buckets[1]  # distinct buckets
        hits[tuple(sorted(buckets))] += 1  # type: ignore[arg-type]
    for pair, prob in expected.items():
        assert _within(hits[pair] / DRAWS, prob, DRAWS), (pair, hits[pair] / DRAWS, prob)


def test_draw_all_buckets_returns_one_per_bucket_sorted(stat_db: ExemplarDB) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        out = stat_db.sample_exemplars(TASK, 4, TAU, rng)
        assert sorted(STAT_BUCKETS[_tag(e)] for e in out) == [10, 12, 15, 20]
        assert [e.speedup for e in out] == sorted(e.speedup for e in out)


def test_sampling_is_reproducible_with_a_seed(stat_db: ExemplarDB) -> None:
    a = [stat_db.sample_exemplars(TASK, 2, TAU, np.random.default_rng(5)) for _ in range(3)]
    b = [stat_db.sample_exemplars(TASK, 2, TAU, np.random.default_rng(5)) for _ in range(3)]
    assert a == b


# ---------------------------------------------------------------------------------------------
# Fallbacks and validation
# ---------------------------------------------------------------------------------------------


def test_fallback_fewer_buckets_than_n(db: ExemplarDB) -> None:
    # Bucket 10 holds a1..a3, bucket 20 holds b1: n=3 takes b1, one of the a's, and one more a.
    db.add_many([rec(TASK, code("a1"), 1.01), rec(TASK, code("a2"), 1.02),
                 rec(TASK, code("a3"), 1.03), rec(TASK, code("b1"), 2.0)])  # fmt: skip
    rng = np.random.default_rng(11)
    counts: Counter[str] = Counter()
    trials = 3000
    for _ in range(trials):
        out = db.sample_exemplars(TASK, 3, TAU, rng)
        tags = [e.code.split("'")[1] for e in out]
        assert len(set(tags)) == 3
        assert "b1" in tags
        assert [e.speedup for e in out] == sorted(e.speedup for e in out)
        counts.update(tags)
    # Each a-code: 1/3 as the bucket's representative + 2/3 * 1/2 as the filler = 2/3.
    for tag in ("a1", "a2", "a3"):
        assert _within(counts[tag] / trials, 2 / 3, trials), (tag, counts[tag] / trials)


def test_fallback_fewer_codes_than_n_and_zero_codes(db: ExemplarDB) -> None:
    rng = np.random.default_rng(0)
    assert db.sample_exemplars(TASK, 3, TAU, rng) == []
    db.add(rec(TASK, code("x"), None, verdict="COMPILE_ERROR"))
    assert db.sample_exemplars(TASK, 3, TAU, rng) == []  # failures are never exemplars
    db.add_many([rec(TASK, code("p"), 1.5), rec(TASK, code("q"), 1.2), rec(TASK, code("q"), 1.4)])
    out = db.sample_exemplars(TASK, 5, TAU, rng)
    assert [e.code for e in out] == [code("q"), code("p")]  # increasing speedup
    assert [e.speedup for e in out] == pytest.approx([1.3, 1.5])  # q: mean of its two runs
    assert db.sample_exemplars(TASK, 2, TAU, rng) == out  # exactly n codes: all of them
    assert db.sample_exemplars(TASK, 0, TAU, rng) == []


def test_validation_errors(db: ExemplarDB) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n .* >= 0"):
        db.sample_exemplars(TASK, -1, TAU, rng)
    with pytest.raises(ValueError, match="n .* integer"):
        db.sample_exemplars(TASK, 1.5, TAU, rng)  # type: ignore[arg-type]
    for tau in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tau"):
            db.sample_exemplars(TASK, 1, tau, rng)
    for width in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="bucket_width"):
            ExemplarDB(":memory:", bucket_width=width)
    with pytest.raises(ValueError, match="tau"):
        sample_from_buckets([Bucket(10, 1.0, (Exemplar("x", 1.0),))], 1, 0.0, rng)
    with pytest.raises(ValueError, match="k must be"):
        db.best(TASK, k=-1)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    exemplars_cli.build_parser(parser)
    return exemplars_cli.run(parser.parse_args(argv))


@pytest.fixture()
def cli_db(tmp_path: Path) -> Path:
    path = tmp_path / "ex.sqlite"
    with ExemplarDB(path) as d:
        d.add_many([
            rec(TASK, code("g1"), 1.5), rec(TASK, code("g2"), 2.25), rec(TASK, code("g2"), 2.0),
            rec(TASK, "", None, verdict="PARSE_FAILURE"),
            rec("level2/7_Conv", code("c1"), 1.1), rec("level2/7_Conv", code("c2"), None,
                                                      verdict="TIMEOUT"),
        ])  # fmt: skip
    return path


def test_cli_summary(cli_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["--db", str(cli_db)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["task", "samples", "OK", "best", "buckets"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows[TASK] == ["4", "3", "2.250x", "2"]
    assert rows["level2/7_Conv"] == ["2", "1", "1.100x", "1"]

    assert _cli(["--db", str(cli_db), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["task"] for s in summary] == [TASK, "level2/7_Conv"]
    assert summary[0]["best_speedup"] == 2.25


def test_cli_task_json(cli_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["--db", str(cli_db), "--task", TASK, "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert [i["speedup"] for i in items] == [2.25, 1.5]  # distinct codes, best first
    assert items[0]["code"] == code("g2")
    assert all(i["task_id"] == TASK and i["verdict"] == "OK" for i in items)

    assert _cli(["--db", str(cli_db), "--task", TASK, "--top", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].split()[:2] == ["rank", "speedup"] and len(out) == 2
    assert out[1].split()[:2] == ["1", "2.250x"]

    assert _cli(["--db", str(cli_db), "--task", "nope/0"]) == 1
    assert "no samples for task 'nope/0'" in capsys.readouterr().err


def test_cli_export(cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "export"
    assert _cli(["--db", str(cli_db), "--export", str(out_dir)]) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == [
        "level1_1_NewGELU__1__2.250x.py",
        "level1_1_NewGELU__2__1.500x.py",
        "level2_7_Conv__1__1.100x.py",
    ]
    assert sorted(Path(p).name for p in printed) == names
    assert (out_dir / names[0]).read_text() == code("g2")

    only = tmp_path / "only"
    assert _cli(["--db", str(cli_db), "--task", TASK, "--top", "1", "--export", str(only)]) == 0
    assert [p.name for p in only.iterdir()] == ["level1_1_NewGELU__1__2.250x.py"]


def test_cli_missing_or_bad_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.sqlite"
    assert _cli(["--db", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not missing.exists()  # not created as a side effect
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite" * 200)
    assert _cli(["--db", str(junk)]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_random_rule_is_uniform_over_distinct_codes(stat_db: ExemplarDB) -> None:
    # The control arm: every distinct OK code equally likely, whatever its bucket or score.
    rng = np.random.default_rng(5)
    hits: Counter[str] = Counter()
    for _ in range(DRAWS):
        (ex,) = sample_random_exemplars(stat_db, TASK, 1, rng)
        hits[_tag(ex)] += 1
    p = 1 / len(STAT_SPEEDUPS)
    for tag in STAT_SPEEDUPS:
        assert _within(hits[tag] / DRAWS, p, DRAWS), (tag, hits[tag] / DRAWS, p)
    pair = sample_random_exemplars(stat_db, TASK, 2, rng)
    assert len({e.code for e in pair}) == 2 and pair == sorted(pair, key=lambda e: (e.speedup, e.code))
    assert len(sample_random_exemplars(stat_db, TASK, 99, rng)) == len(STAT_SPEEDUPS)
    assert sample_random_exemplars(stat_db, "no-such-task", 2, rng) == []
