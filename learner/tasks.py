"""Task sets the learner trains and evaluates on, and the SFT pairs built from them.

A task set is a suite, ``"builtin"`` (evalfarm's built-in tasks) or the path of a KernelBench
checkout (the farm daemons must then run with the same ``--kernelbench-root``), and an optional
comma list of ids (``"L1/1,L2/6"``, file stems or names; empty means every task).

SFT pairs come from the built-in suite's correct ("fast") variants, formatted in the response
protocol of `learner.prompts` (the trainer scores them on the farm first: their measured
speedups appear in contrastive prompts and seed the exemplar buckets), plus any JSONL file of pairs a user supplies, one JSON object per
line, either ``{"prompt": ..., "completion": ...}`` or ``{"task": "L1/1", "code": ...}`` (the
prompt is then built from the task's reference and the code wrapped in the protocol).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from pathlib import Path

from evalfarm.tasks.format import TaskFormatError
from evalfarm.tasks.suite import builtin_suite, kernelbench_suite
from learner.prompts import Exemplar, contrastive_prompt, format_response, sft_prompt


class TaskSetError(ValueError):
    """A task set or SFT data file the learner cannot use."""


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    task_id: str  # what the farm resolves: "L1/1" (built-in) or the KernelBench id
    name: str
    source: str  # the reference code shown in prompts

    @property
    def sha256(self) -> str:
        """The task's identity on the wire: the SHA-256 of its source (evalfarm Task.sha256)."""
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class SFTPair:
    task_id: str
    prompt: str
    completion: str


def load_task_set(suite: str = "builtin", ids: str = "") -> list[TaskInfo]:
    """`suite` is "builtin" or a KernelBench checkout path; `ids` a comma list (empty: all)."""
    try:
        task_suite = builtin_suite() if suite == "builtin" else kernelbench_suite(suite)
        keys = [k.strip() for k in ids.split(",") if k.strip()]
        entries = [task_suite.find(k) for k in keys] if keys else list(task_suite.entries)
    except TaskFormatError as err:
        raise TaskSetError(str(err)) from None
    if not entries:
        raise TaskSetError(f"task set {suite!r} is empty")
    out = []
    for e in entries:
        task = task_suite.load(e.task_id)
        out.append(TaskInfo(task_id=e.task_id, name=e.name, source=task.source))
    return out


def _docstring(source: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return " ".join((ast.get_docstring(node) or "").split())
    return " ".join((ast.get_docstring(tree) or "").split())


@dataclasses.dataclass(frozen=True)
class SFTTarget:
    """A correct, faster implementation of a task, and the completion that teaches it."""

    task: TaskInfo
    code: str
    completion: str


def builtin_sft_targets(tasks: list[TaskInfo], device: str = "cpu") -> list[SFTTarget]:
    """The built-in suite's fast variants of `tasks` that run on `device`."""
    suite = builtin_suite()
    out = []
    for t in tasks:
        try:
            variants = suite.variants(t.task_id)
        except Exception:  # noqa: BLE001 - not a built-in task: it has no shipped variants
            continue
        for v in variants:
            if v.kind != "fast" or not v.runs_on(device):
                continue
            code = v.path.read_text()
            why = _docstring(code) or "The reference does more work than the result needs."
            design = f"Approach: {v.label.replace('_', ' ')}. Same inputs, same outputs, same parameters."
            out.append(SFTTarget(t, code, format_response(why, design, code)))
    return out


def sft_pairs_for(target: SFTTarget, measured: float | None) -> list[SFTPair]:
    """A target under the plain prompt and the contrastive prompt without exemplars; with a
    measured speedup also under a contrastive prompt that shows the code with its real score,
    so the policy has seen every prompt form RL will use."""
    t = target.task
    pairs = [SFTPair(t.task_id, sft_prompt(t.source), target.completion),
             SFTPair(t.task_id, contrastive_prompt(t.source, []), target.completion)]
    if measured is not None:
        shown = [Exemplar(target.code.strip(), measured)]
        pairs.append(SFTPair(t.task_id, contrastive_prompt(t.source, shown), target.completion))
    return pairs


def read_jsonl_pairs(path: str | Path, tasks: dict[str, TaskInfo] | None = None) -> list[SFTPair]:
    """User-supplied SFT pairs; errors name the line."""
    p = Path(path)
    if not p.is_file():
        raise TaskSetError(f"SFT data file {p} does not exist")
    pairs = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise TaskSetError(f"{p}:{n}: not JSON ({err.msg})") from None
        if not isinstance(obj, dict):
            raise TaskSetError(f"{p}:{n}: expected a JSON object")
        if isinstance(obj.get("prompt"), str) and isinstance(obj.get("completion"), str):
            pairs.append(SFTPair(str(obj.get("task", "")), obj["prompt"], obj["completion"]))
        elif isinstance(obj.get("task"), str) and isinstance(obj.get("code"), str):
            task = (tasks or {}).get(obj["task"])
            if task is None:
                raise TaskSetError(f"{p}:{n}: task {obj['task']!r} is not in the configured task set")
            completion = format_response("", "", obj["code"])
            pairs.append(SFTPair(task.task_id, sft_prompt(task.source), completion))
        else:
            raise TaskSetError(f"{p}:{n}: need string fields 'prompt' and 'completion', "
                               "or 'task' and 'code'")
    if not pairs:
        raise TaskSetError(f"{p} holds no SFT pairs")
    return pairs
