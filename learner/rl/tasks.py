"""Task sets the learner trains and evaluates on, and the SFT pairs built from them.

A task set is a suite, ``"builtin"`` (evalfarm's built-in tasks) or the path of a KernelBench
checkout (the farm daemons must then run with the same ``--kernelbench-root``), and an optional
comma list of ids (``"L1/1,L2/6"``, file stems or names; empty means every task).

SFT pairs come from the task's known programs (`task_programs`): the built-in suite's correct
("fast") variants and, for the speed-mixture experiment, also the renamed reference (about 1x),
a slowed copy (about 0.5x) and the shipped wrong variants, formatted in the response protocol of
`learner.rl.prompts` (the trainer scores them on the farm first: their measured speedups seed the
exemplar buckets and the frozen evaluation exemplars), plus any JSONL file of pairs a user supplies, one JSON object per
line, either ``{"prompt": ..., "completion": ...}`` or ``{"task": "L1/1", "code": ...}`` (the
prompt is then built from the task's reference and the code wrapped in the protocol).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from evalfarm.tasks.format import TaskFormatError
from evalfarm.tasks.suite import builtin_suite, kernelbench_suite
from learner.rl.prompts import Exemplar, contrastive_prompt, format_response, sft_prompt


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


def resolve_task_ids(suite: str, keys: Sequence[str]) -> list[str]:
    """The task ids of `keys` (ids, file stems or names) in `suite` ("builtin" or a KernelBench
    checkout path); an unknown key raises the suite's error."""
    task_suite = builtin_suite() if suite == "builtin" else kernelbench_suite(suite)
    return [task_suite.find(k).task_id for k in keys]


def builtin_sources() -> list[str]:
    """Every built-in task's reference and shipped variants (text the from-scratch tokenizer is
    fitted to)."""
    suite = builtin_suite()
    texts = []
    for t in suite.entries:
        texts.append(suite.load(t.task_id).source)
        texts += [v.path.read_text() for v in suite.variants(t.task_id)]
    return texts


def _docstring(source: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return " ".join((ast.get_docstring(node) or "").split())
    return " ".join((ast.get_docstring(tree) or "").split())


PROGRAM_KINDS: tuple[str, ...] = ("reference", "slowed", "fast", "wrong")


@dataclasses.dataclass(frozen=True)
class Program:
    """A known implementation of a task and the completion that teaches it.

    ``kind``: "fast" (a shipped correct, faster variant), "reference" (the reference itself,
    renamed: about 1x), "slowed" (the reference computing its result twice: correct, about 0.5x),
    "wrong" (a shipped subtly incorrect variant). ``name`` is unique per task."""

    task: TaskInfo
    kind: str
    name: str
    code: str
    completion: str

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.code.strip().encode("utf-8")).hexdigest()


def _model_class(tree: ast.Module, source: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return node
    raise TaskSetError("the reference defines no top-level class Model")


def _docstring_lines(body: list[ast.stmt]) -> set[int]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return set(range(first.lineno - 1, first.end_lineno or first.lineno))
    return set()


def _without_harness(source: str, tree: ast.Module) -> list[str]:
    """The reference's lines without get_inputs / get_init_inputs (a candidate does not need
    them) and without docstrings (completions stay short)."""
    lines = source.splitlines()
    drop = _docstring_lines(tree.body)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.update(range(start - 1, node.end_lineno or node.lineno))
        if isinstance(node, ast.ClassDef) and node.name == "Model" and len(node.body) > 1:
            drop |= _docstring_lines(node.body)
    return [ln if i not in drop else None for i, ln in enumerate(lines)]  # type: ignore[misc]


def _join(lines: list[str | None]) -> str:
    text = "\n".join(ln for ln in lines if ln is not None)
    return re.sub(r"\n{3,}", "\n\n\n", text).strip() + "\n"


def renamed_reference(source: str) -> str:
    """The reference as a candidate: ``class Model`` renamed to ``ModelNew`` (speedup about 1x)."""
    tree = ast.parse(source)
    cls = _model_class(tree, source)
    lines = _without_harness(source, tree)
    i = cls.lineno - 1
    lines[i] = re.sub(r"\bclass\s+Model\b", "class ModelNew", lines[i] or "", count=1)
    return _join(lines).replace("super(Model, self)", "super(ModelNew, self)")


def slowed_reference(source: str) -> str:
    """The renamed reference computing its result twice: exactly correct, about half as fast."""
    tree = ast.parse(source)
    cls = _model_class(tree, source)
    forward = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise TaskSetError("the reference's class Model has no forward method")
    lines = _without_harness(source, tree)
    i = forward.lineno - 1
    lines[i] = (lines[i] or "").replace("def forward(", "def _forward(", 1)
    indent = " " * forward.col_offset
    end = (cls.end_lineno or cls.lineno) - 1
    lines[end] = (lines[end] or "") + (
        f"\n\n{indent}def forward(self, *args):\n"
        f"{indent}    self._forward(*args)\n"
        f"{indent}    return self._forward(*args)"
    )
    i = cls.lineno - 1
    lines[i] = re.sub(r"\bclass\s+Model\b", "class ModelNew", lines[i] or "", count=1)
    return _join(lines).replace("super(Model, self)", "super(ModelNew, self)")


_TEXTS = {
    "reference": ("The reference is already a direct implementation.", "Approach: keep the reference computation."),
    "slowed": ("The reference's computation is cheap to repeat.", "Approach: compute the result twice and return the second."),
}


def task_programs(tasks: list[TaskInfo], device: str = "cpu", *, mixture: bool = False) -> list[Program]:
    """The known programs of `tasks`: the built-in suite's fast variants that run on `device`;
    with `mixture` also the renamed reference, the slowed copy and the wrong variants."""
    suite = builtin_suite()
    out = []
    for t in tasks:
        try:
            variants = suite.variants(t.task_id)
        except Exception:  # noqa: BLE001 - not a built-in task: it has no shipped variants
            variants = []
        if mixture:
            for kind, make in (("reference", renamed_reference), ("slowed", slowed_reference)):
                code = make(t.source)
                out.append(Program(t, kind, kind, code, format_response(*_TEXTS[kind], code)))
        for v in variants:
            if v.kind == "wrong" and not mixture:
                continue
            if not v.runs_on(device):
                continue
            code = v.path.read_text()
            why = _docstring(code) or "The reference does more work than the result needs."
            design = f"Approach: {v.label.replace('_', ' ')}. Same inputs, same outputs, same parameters."
            out.append(Program(t, v.kind, f"{v.kind}:{v.label}", code, format_response(why, design, code)))
    return out


def builtin_sft_targets(tasks: list[TaskInfo], device: str = "cpu") -> list[Program]:
    """The built-in suite's fast variants of `tasks` that run on `device`."""
    return task_programs(tasks, device)


def sft_pairs_for(program: Program, shown: Sequence[Exemplar] = ()) -> list[SFTPair]:
    """A program under the plain prompt, under the contrastive prompt with no exemplars and, when
    `shown` is given, under the contrastive prompt with those exemplars (so that prompt form is
    not new to the policy when RL and evaluation use it).

    The caller draws `shown` independently of the target (`exemplars_for_sft`): a pair whose
    prompt shows exactly its own target, or always the fastest code, would teach "copy the
    exemplar shown" rather than anything about speed."""
    t = program.task
    pairs = [SFTPair(t.task_id, sft_prompt(t.source), program.completion),
             SFTPair(t.task_id, contrastive_prompt(t.source, []), program.completion)]
    if shown:
        pairs.append(SFTPair(t.task_id, contrastive_prompt(t.source, shown, seed=int(program.sha[:8], 16)),
                             program.completion))
    return pairs


def exemplars_for_sft(program: Program, candidates: Sequence[Exemplar], n: int) -> list[Exemplar]:
    """`n` of the task's measured programs drawn uniformly (seeded by the target's hash), whatever
    their speed and whether or not the target is among them."""
    pool = sorted(candidates, key=lambda e: (e.speedup, e.code))
    if len(pool) <= n:
        return pool
    rng = random.Random(int(program.sha[:16], 16))
    return rng.sample(pool, n)


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
