"""Durable exemplar database: every scored sample, and the contrastive exemplar sampler.

Every sample the learner consumes is stored as a ``SampleRecord`` in a SQLite file (WAL mode),
keyed by ``sample_id`` so that re-adding a sample is a no-op. Rows remember the learner ``step``
that consumed them; on resume, ``truncate_after(checkpoint_step)`` drops the rows a crashed run
wrote after its last checkpoint, so the database matches the restored learner state.

Exemplar sampling (CUDA-L1, contrastive RL). For one task, the distinct successful codes (verdict
``OK`` with a speedup; a code's identity is the sha256 of its stripped text, its speedup the mean of
its OK measurements) are grouped into buckets of width ``bucket_width``: bucket index
``floor(speedup / width)``. With ``mu_i`` the mean speedup of bucket ``i`` and ``mu_bar`` the mean
of the ``mu_i``, bucket ``i`` is chosen with probability

    p_i = softmax((mu_i - mu_bar) / tau)

and ``n`` distinct buckets are drawn without replacement (renormalising over the buckets left
after each draw); one exemplar is drawn uniformly inside each chosen bucket. When the task has
fewer than ``n`` buckets, every bucket contributes one exemplar and the remaining places are
filled with further distinct codes drawn uniformly; with at most ``n`` distinct codes, all of them
are returned. Exemplars come back in increasing order of speedup.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import sqlite3
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from evalfarm.verdict import Verdict
from learner.rl.prompts import Exemplar

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
PARSE_FAILURE = "PARSE_FAILURE"  # the response did not follow the protocol (never scored)
LOST = "LOST"  # the farm gave no result before the learner's deadline (learner.rl.farm)
KNOWN_VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict) + (PARSE_FAILURE, LOST)

# Added to speedup / width before flooring, so that e.g. 0.3 / 0.1 = 2.9999999999999996 lands in
# bucket 3 as a reader expects.
_BUCKET_EPS = 1e-9


class ExemplarDBError(RuntimeError):
    """The database file cannot be used (wrong schema version, not a SQLite file, closed)."""


@dataclasses.dataclass(frozen=True)
class SampleRecord:
    """One scored sample, as the learner used it."""

    sample_id: str
    task_id: str
    code: str
    verdict: str
    speedup: float | None
    reward: float | None
    policy_version: int
    step: int
    stage: str
    prompt_version: str = ""
    detail: str = ""
    created: float = 0.0

    def __post_init__(self) -> None:
        if not self.sample_id:
            raise ValueError("SampleRecord.sample_id must be a non-empty string")
        if not self.task_id:
            raise ValueError(f"SampleRecord {self.sample_id!r}: task_id must be non-empty")
        if self.verdict not in KNOWN_VERDICTS:
            raise ValueError(
                f"SampleRecord {self.sample_id!r}: unknown verdict {self.verdict!r}; "
                f"expected one of {KNOWN_VERDICTS}"
            )
        if self.speedup is not None:
            if self.verdict != Verdict.OK.value:
                raise ValueError(
                    f"SampleRecord {self.sample_id!r}: a speedup is only recorded for verdict OK, "
                    f"got speedup={self.speedup!r} with verdict {self.verdict}"
                )
            if not (math.isfinite(self.speedup) and self.speedup > 0):
                raise ValueError(
                    f"SampleRecord {self.sample_id!r}: speedup must be finite and > 0, "
                    f"got {self.speedup!r}"
                )
        if self.reward is not None and not math.isfinite(self.reward):
            raise ValueError(
                f"SampleRecord {self.sample_id!r}: reward must be finite or None, got {self.reward!r}"
            )


@dataclasses.dataclass(frozen=True)
class Bucket:
    """Distinct successful codes whose speedup falls in ``[index * width, (index + 1) * width)``."""

    index: int
    mean_speedup: float
    members: tuple[Exemplar, ...]


def code_sha256(code: str) -> str:
    """Identity of a code: sha256 of its stripped text."""
    return hashlib.sha256(code.strip().encode("utf-8")).hexdigest()


def _check_n_tau(n: int, tau: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n (number of exemplars) must be an integer >= 0, got {n!r}")
    if not (isinstance(tau, int | float | np.floating) and math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau (softmax temperature) must be a finite number > 0, got {tau!r}")


def _check_width(width: float) -> None:
    if not (isinstance(width, int | float | np.floating) and math.isfinite(width) and width > 0):
        raise ValueError(f"bucket_width must be a finite number > 0, got {width!r}")


def bucket_codes(codes: Iterable[Exemplar], width: float) -> list[Bucket]:
    """Group distinct codes (one ``Exemplar`` each) into speedup buckets, sorted by index.

    Members of a bucket are ordered by (speedup, code) so that seeded sampling is reproducible.
    """
    _check_width(width)
    groups: dict[int, list[Exemplar]] = {}
    for ex in codes:
        groups.setdefault(math.floor(ex.speedup / width + _BUCKET_EPS), []).append(ex)
    out = []
    for index in sorted(groups):
        members = tuple(sorted(groups[index], key=lambda e: (e.speedup, e.code)))
        out.append(Bucket(index, statistics.fmean(m.speedup for m in members), members))
    return out


def _draw_softmax(logits: Sequence[float], rng: np.random.Generator) -> int:
    """Index ``i`` drawn with probability softmax(logits)_i (shifted by the max: no overflow)."""
    top = max(logits)
    weights = [math.exp(z - top) for z in logits]
    u = float(rng.random()) * math.fsum(weights)
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)  # u rounded up to the total


def sample_from_buckets(
    buckets: Sequence[Bucket], n: int, tau: float, rng: np.random.Generator
) -> list[Exemplar]:
    """The contrastive sampling rule (see the module docstring) over precomputed buckets."""
    _check_n_tau(n, tau)
    if n == 0 or not buckets:
        return []
    all_codes = [m for b in buckets for m in b.members]
    if len(all_codes) <= n:
        chosen = list(all_codes)
    elif len(buckets) < n:
        chosen, rest = [], []
        for b in buckets:
            j = int(rng.integers(len(b.members)))
            chosen.append(b.members[j])
            rest.extend(m for i, m in enumerate(b.members) if i != j)
        picks = rng.choice(len(rest), size=n - len(chosen), replace=False)
        chosen.extend(rest[int(i)] for i in sorted(picks))
    else:
        mu_bar = statistics.fmean(b.mean_speedup for b in buckets)
        logits = [(b.mean_speedup - mu_bar) / float(tau) for b in buckets]
        remaining = list(range(len(buckets)))
        chosen = []
        for _ in range(n):
            bucket = buckets[remaining.pop(_draw_softmax([logits[i] for i in remaining], rng))]
            chosen.append(bucket.members[int(rng.integers(len(bucket.members)))])
    return sorted(chosen, key=lambda e: (e.speedup, e.code))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    sample_id      TEXT PRIMARY KEY,
    task_id        TEXT NOT NULL,
    code           TEXT NOT NULL,
    code_sha256    TEXT NOT NULL,
    verdict        TEXT NOT NULL,
    speedup        REAL,
    reward         REAL,
    policy_version INTEGER NOT NULL,
    step           INTEGER NOT NULL,
    stage          TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    detail         TEXT NOT NULL,
    created        REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_task ON samples (task_id);
CREATE INDEX IF NOT EXISTS samples_task_verdict ON samples (task_id, verdict);
CREATE INDEX IF NOT EXISTS samples_step ON samples (step);
"""

_COLUMNS = (
    "sample_id, task_id, code, verdict, speedup, reward, policy_version, step, stage, "
    "prompt_version, detail, created"
)


def _row_to_record(row: Sequence[object]) -> SampleRecord:
    return SampleRecord(*row)  # type: ignore[arg-type]


class ExemplarDB:
    """SQLite-backed store of ``SampleRecord`` rows; safe to share between threads."""

    def __init__(self, path: str | Path, *, bucket_width: float = 0.1) -> None:
        _check_width(bucket_width)
        self.bucket_width = float(bucket_width)
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            with self._conn:
                self._conn.executescript(_SCHEMA)
                row = self._conn.execute(
                    "SELECT value FROM meta WHERE key = 'schema_version'"
                ).fetchone()
                if row is None:
                    self._conn.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
        except sqlite3.DatabaseError as e:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise ExemplarDBError(
                f"{self.path}: cannot open as an exemplar database ({e}); "
                "is it a SQLite file written by learner.rl.exemplars?"
            ) from e
        if row is not None and row[0] != str(SCHEMA_VERSION):
            self._conn.close()
            self._conn = None
            raise ExemplarDBError(
                f"{self.path}: schema version {row[0]}, this code reads version {SCHEMA_VERSION}; "
                "use a matching learner version or start a new database"
            )
        log.debug("opened exemplar database %s", self.path)

    # -- plumbing -------------------------------------------------------------------------------

    def _c(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ExemplarDBError(f"{self.path}: the database is closed")
        return self._conn

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        with self._lock:
            return self._c().execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ExemplarDB:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------------

    @staticmethod
    def _row(rec: SampleRecord) -> tuple:
        created = rec.created if rec.created else time.time()
        return (
            rec.sample_id, rec.task_id, rec.code, code_sha256(rec.code), rec.verdict,
            rec.speedup, rec.reward, int(rec.policy_version), int(rec.step), rec.stage,
            rec.prompt_version, rec.detail, float(created),
        )  # fmt: skip

    _INSERT = (
        "INSERT OR IGNORE INTO samples (sample_id, task_id, code, code_sha256, verdict, speedup, "
        "reward, policy_version, step, stage, prompt_version, detail, created) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def add(self, rec: SampleRecord) -> bool:
        """Store ``rec``; False (and nothing changes) when its sample_id is already present."""
        return self.add_many([rec]) == 1

    def add_many(self, recs: Iterable[SampleRecord]) -> int:
        """Store records in one transaction; returns how many were new."""
        rows = [self._row(r) for r in recs]
        added = 0
        with self._lock:
            conn = self._c()
            with conn:
                for row in rows:
                    added += conn.execute(self._INSERT, row).rowcount
        return added

    def truncate_after(self, step: int) -> int:
        """Delete rows with ``step > step`` (make the database match a checkpoint)."""
        with self._lock:
            conn = self._c()
            with conn:
                deleted = conn.execute("DELETE FROM samples WHERE step > ?", (int(step),)).rowcount
        if deleted:
            log.info("%s: removed %d samples recorded after step %d", self.path, deleted, step)
        return deleted

    # -- exemplars ------------------------------------------------------------------------------

    def _distinct_codes(self, task_id: str) -> list[Exemplar]:
        """Distinct OK codes of a task with the mean of their speedups (first-stored text)."""
        rows = self._query(
            "SELECT code_sha256, code, speedup FROM samples "
            "WHERE task_id = ? AND verdict = 'OK' AND speedup IS NOT NULL ORDER BY rowid",
            (task_id,),
        )
        codes: dict[str, str] = {}
        speedups: dict[str, list[float]] = {}
        for sha, code, speedup in rows:
            codes.setdefault(sha, code)
            speedups.setdefault(sha, []).append(float(speedup))
        return [Exemplar(codes[sha], statistics.fmean(speedups[sha])) for sha in codes]

    def buckets(self, task_id: str) -> list[Bucket]:
        """The task's distinct successful codes grouped by speedup, sorted by bucket index."""
        return bucket_codes(self._distinct_codes(task_id), self.bucket_width)

    def sample_exemplars(
        self, task_id: str, n: int, tau: float, rng: np.random.Generator
    ) -> list[Exemplar]:
        """Draw up to ``n`` exemplars for a prompt (rule in the module docstring)."""
        _check_n_tau(n, tau)
        if n == 0:
            return []
        return sample_from_buckets(self.buckets(task_id), n, tau, rng)

    # -- reading --------------------------------------------------------------------------------

    def best(self, task_id: str | None = None, k: int = 10) -> list[SampleRecord]:
        """Top ``k`` distinct OK codes, highest speedup first.

        A code is represented by its fastest measurement (ties: the earliest stored); with
        ``task_id=None`` codes are distinct per task.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0:
            return []
        where, params = "verdict = 'OK' AND speedup IS NOT NULL", []
        if task_id is not None:
            where += " AND task_id = ?"
            params.append(task_id)
        rows = self._query(
            f"SELECT {_COLUMNS}, code_sha256 FROM samples WHERE {where} "
            "ORDER BY speedup DESC, rowid ASC",
            params,
        )
        out: list[SampleRecord] = []
        seen: set[tuple[str, str]] = set()
        for row in rows:
            key = (row[1], row[-1])
            if key in seen:
                continue
            seen.add(key)
            out.append(_row_to_record(row[:-1]))
            if len(out) >= k:
                break
        return out

    def tasks(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT task_id FROM samples ORDER BY task_id")]

    def counts(self, task_id: str | None = None) -> dict[str, int]:
        """verdict -> number of samples (all tasks, or one)."""
        if task_id is None:
            rows = self._query("SELECT verdict, COUNT(*) FROM samples GROUP BY verdict")
        else:
            rows = self._query(
                "SELECT verdict, COUNT(*) FROM samples WHERE task_id = ? GROUP BY verdict",
                (task_id,),
            )
        return {v: int(c) for v, c in sorted(rows)}

    def records(self, task_id: str | None = None, stage: str | None = None) -> list[SampleRecord]:
        """Stored records in insertion order, optionally filtered by task and stage."""
        clauses, params = [], []
        if task_id is not None:
            clauses.append("task_id = ?")
            params.append(task_id)
        if stage is not None:
            clauses.append("stage = ?")
            params.append(stage)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query(f"SELECT {_COLUMNS} FROM samples{where} ORDER BY rowid", params)
        return [_row_to_record(r) for r in rows]

    def max_step(self) -> int | None:
        value = self._query("SELECT MAX(step) FROM samples")[0][0]
        return None if value is None else int(value)


def sample_random_exemplars(db: ExemplarDB, task_id: str, n: int, rng: np.random.Generator) -> list[Exemplar]:
    """The control for the bucket rule: `n` distinct successful codes of the task drawn uniformly,
    whatever their scores (all of them when there are at most `n`)."""
    _check_n_tau(n, 1.0)
    codes = sorted(db._distinct_codes(task_id), key=lambda e: (e.speedup, e.code))
    if len(codes) <= n:
        return codes
    picks = rng.choice(len(codes), size=n, replace=False)
    return sorted((codes[int(i)] for i in picks), key=lambda e: (e.speedup, e.code))
