"""Turning a ScoreRequest into checked in-process records, or an INVALID_ARGUMENT message."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from evalfarm import reverify
from evalfarm.client.wire import config_from_pb, options_from_pb
from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.tasks import (
    Candidate,
    Task,
    TaskFormatError,
    builtin_suite,
    kernelbench_suite,
    parse_task,
)
from evalfarm.v1 import evalfarm_pb2 as pb

MAX_SAMPLE_ID = 256
MAX_TAGS = 64
MAX_TAG_BYTES = 1024


class InvalidRequest(ValueError):
    """The request is malformed; the message says what is wrong (-> INVALID_ARGUMENT)."""


class TaskMismatch(InvalidRequest):
    """The task's name resolves here to content other than the client's (-> FAILED_PRECONDITION)."""


@dataclasses.dataclass(frozen=True)
class Prepared:
    task: Task
    candidate: Candidate
    config: ScoreConfig  # device is a placeholder until a slot is assigned
    sample_id: str
    tags: dict[str, str]
    no_cache: bool
    deadline_s: float  # from when a slot starts the evaluation; 0 = none
    reverification: bool = False  # runs ahead of queued ordinary work; never from the cache


def decode_source(raw: bytes, what: str, limit: int, allow_empty: bool = False) -> str:
    """The UTF-8 text of a source field; ``allow_empty``: an empty or blank source is text too
    (a candidate's: scored, as a local score would, not refused)."""
    if not raw and not allow_empty:
        raise InvalidRequest(f"{what} is empty")
    if len(raw) > limit:
        raise InvalidRequest(f"{what} is {len(raw)} bytes; the limit is {limit} (--max-source-bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRequest(f"{what} is not valid UTF-8 (byte {err.start})") from None
    if not text.strip() and not allow_empty:
        raise InvalidRequest(f"{what} is only whitespace")
    return text


class TaskResolver:
    """Resolves task names on the daemon: built-in ids/names, or KernelBench with a root.

    File paths are never opened on a client's behalf.
    """

    def __init__(self, kernelbench_root: Path | None) -> None:
        self._root = kernelbench_root
        self.label = "built-in suite" if kernelbench_root is None else f"KernelBench suite at {kernelbench_root}"
        self._cache: dict[str, Task] = {}

    def resolve(self, name: str) -> Task:
        if name in self._cache:
            return self._cache[name]
        if len(name) > 256:
            raise InvalidRequest("task.name is too long")
        try:
            if name.startswith("builtin:") or self._root is None:
                task = builtin_suite().load(name.removeprefix("builtin:"))
            else:
                task = kernelbench_suite(self._root).load(name)
        except TaskFormatError as err:  # UnknownTaskError is a TaskFormatError
            raise InvalidRequest(f"unknown task: {err}") from None
        if len(self._cache) < 10_000:
            self._cache[name] = task
        return task


def check_task_identity(ref: pb.TaskRef, task: Task, suite_label: str) -> None:
    """Raise TaskMismatch when the request carries a content hash that ``task`` does not have."""
    want = ref.sha256.strip().lower()
    if not want:
        return
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise InvalidRequest("task.sha256 must be 64 lowercase hex digits (the SHA-256 of the task's UTF-8 source)")
    if want == task.sha256:
        return
    if ref.WhichOneof("kind") == "source":
        raise InvalidRequest(f"task.sha256 {want[:12]}... does not match the task.source sent ({task.sha256[:12]}...)")
    raise TaskMismatch(
        f"task {ref.name!r} is {want[:12]}... on the client but {task.sha256[:12]}... in this daemon's {suite_label} "
        f"({task.path or task.name}): the two suites differ; start the daemon with the client's suite "
        "(--kernelbench-root) or send the task's source")


def prepare(
    req: pb.ScoreRequest,
    resolver: TaskResolver,
    max_source_bytes: int,
    require_sample_id: bool = False,
    parse: Callable[[str, str], Candidate] = lambda source, name: Candidate(source=source, name=name),
) -> Prepared:
    """Check every field; raise InvalidRequest naming the first problem."""
    if not req.HasField("candidate"):
        raise InvalidRequest("candidate is missing")
    cand_msg = req.candidate
    sample_id = cand_msg.sample_id
    if require_sample_id and not sample_id:
        raise InvalidRequest("candidate.sample_id is required in ScoreStream")
    if len(sample_id) > MAX_SAMPLE_ID:
        raise InvalidRequest(f"candidate.sample_id is longer than {MAX_SAMPLE_ID} characters")
    if len(cand_msg.tags) > MAX_TAGS or any(
        len(k) + len(v) > MAX_TAG_BYTES for k, v in cand_msg.tags.items()
    ):
        raise InvalidRequest(f"candidate.tags: at most {MAX_TAGS} tags of {MAX_TAG_BYTES} bytes each")
    if req.deadline_s < 0:
        raise InvalidRequest("deadline_s must be >= 0")
    # An empty candidate is the candidate's failure (LOAD_ERROR), as a local score says, not a bad request.
    source = decode_source(cand_msg.source, "candidate.source", max_source_bytes, allow_empty=True)

    kind = req.task.WhichOneof("kind") if req.HasField("task") else None
    if kind is None:
        raise InvalidRequest("task is missing: set task.name or task.source")
    try:
        if kind == "name":
            if not req.task.name.strip():
                raise InvalidRequest("task.name is empty")
            task = resolver.resolve(req.task.name.strip())
        else:
            tsrc = decode_source(req.task.source.source, "task.source.source", max_source_bytes)
            task = parse_task(tsrc, req.task.source.name or "task")
        check_task_identity(req.task, task, resolver.label)
        # A candidate that does not parse or lacks ModelNew is scored (COMPILE_ERROR /
        # LOAD_ERROR verdicts), not rejected: for a learner it is a failed sample, not a
        # request to retry elsewhere.
        candidate = parse(source, sample_id or "candidate")
    except TaskFormatError as err:
        raise InvalidRequest(str(err)) from None

    try:
        config = config_from_pb(req.options, device="cpu")
        task.resolve_profile(config.size_profile, "cpu")
    except ConfigError as err:
        raise InvalidRequest(f"bad scoring options: {err}") from None
    except TaskFormatError as err:
        raise InvalidRequest(f"bad scoring options: {err}") from None
    except (TypeError, ValueError) as err:
        raise InvalidRequest(f"bad scoring options {options_from_pb(req.options)}: {err}") from None
    if req.reverification:  # a re-measurement runs what evalfarm.reverify says it needs
        config = reverify.second_config(config)
    return Prepared(
        task=task,
        candidate=candidate,
        config=config,
        sample_id=sample_id,
        tags=dict(cand_msg.tags),
        no_cache=req.no_cache or req.reverification,
        deadline_s=req.deadline_s,
        reverification=req.reverification,
    )
