"""The daemon's result cache: memory plus a SQLite file under the cache dir.

Keyed by (task source sha256, candidate source sha256, scoring options, device kind /
GPU model), so a re-submission is free and a restarted daemon keeps its answers.
INFRA_ERROR results are never cached (they say nothing about the candidate).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

from evalfarm.config import ScoreConfig
from evalfarm.result import ScoreResult
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)


def cache_key(task_sha256: str, candidate_sha256: str, config: ScoreConfig, device_kind: str) -> str:
    options = {k: v for k, v in config.to_dict().items() if k != "device"}
    blob = json.dumps(
        {"task": task_sha256, "candidate": candidate_sha256, "options": options, "device": device_kind},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    def __init__(self, path: Path | None, memory_entries: int = 100_000) -> None:
        self._mem: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._limit = memory_entries
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=5.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, result TEXT NOT NULL, "
                "created REAL DEFAULT (unixepoch('now')))"
            )
            self._db.commit()

    def get(self, key: str) -> ScoreResult | None:
        data = self._mem.get(key)
        if data is not None:
            self._mem.move_to_end(key)
        elif self._db is not None:
            row = self._db.execute("SELECT result FROM results WHERE key = ?", (key,)).fetchone()
            if row is not None:
                try:
                    data = json.loads(row[0])
                except ValueError:
                    data = None
                if data is not None:
                    self._remember(key, data)
        if data is None:
            self.misses += 1
            return None
        try:
            result = ScoreResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as err:  # written by an incompatible version
            log.warning("event=cache_entry_unreadable key=%s error=%r", key[:16], err)
            self.misses += 1
            return None
        self.hits += 1
        return result

    def put(self, key: str, result: ScoreResult) -> bool:
        if result.verdict is Verdict.INFRA_ERROR:
            return False
        data = result.to_dict()
        self._remember(key, data)
        if self._db is not None:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO results (key, result) VALUES (?, ?)",
                    (key, json.dumps(data, default=str)),
                )
                self._db.commit()
            except sqlite3.Error as err:
                log.warning("event=cache_write_failed error=%r", err)
        return True

    def _remember(self, key: str, data: dict[str, Any]) -> None:
        self._mem[key] = data
        self._mem.move_to_end(key)
        while len(self._mem) > self._limit:
            self._mem.popitem(last=False)

    def __len__(self) -> int:
        if self._db is not None:
            return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
        return len(self._mem)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
