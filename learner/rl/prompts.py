"""Prompt templates (versioned) and strict parsing of policy responses.

The policy is asked to rewrite a KernelBench-style PyTorch reference (``class Model``,
``get_inputs()``, ``get_init_inputs()``) as a faster, exactly equivalent ``class ModelNew``.
Every response follows a three-section protocol::

    ## Performance Analysis
    ...
    ## Algorithm Design
    ...
    ## Code Implementation
    ```python
    <complete module defining class ModelNew>
    ```

Two prompt kinds exist:

* ``sft_prompt``: the reference and the request (supervised fine-tuning / self-supervised stage).
* ``contrastive_prompt``: additionally shows earlier implementations with their measured speedups
  so the policy can compare them (contrastive RL, CUDA-L1). They are shown in a shuffled order by
  default (``order="shuffled"``): with a fixed slowest-first order, "copy the last block" would
  win without reading a single score. ``"ascending"`` keeps the old slowest-first order.

Both end with the line ``Response:`` so that the completion starts with ``## Performance
Analysis``. Any change to template text must bump ``PROMPT_VERSION``; the version is recorded
with every sample so that training data never silently mixes templates.

``parse_response`` accepts the reasonable heading variants (``##``, ``###`` or ``####``, any
case, an optional trailing colon as in the paper's own ``## Performance Analysis:``, optional
``**bold**``) and explains itself otherwise: a failure carries a stable ``reason`` key (one of
``PARSE_FAILURE_REASONS``, used as a metric name) and a human-readable ``detail``.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import logging
import math
import random
import re
from collections.abc import Sequence

log = logging.getLogger(__name__)

PROMPT_VERSION: str = "v2"  # v2: exemplar order is a prompt option (shuffled by default)
SECTIONS: tuple[str, ...] = ("Performance Analysis", "Algorithm Design", "Code Implementation")
RESPONSE_MARKER: str = "Response:\n"

PARSE_FAILURE_REASONS: tuple[str, ...] = (
    "empty",
    "missing_section",
    "sections_out_of_order",
    "no_code_block",
    "unterminated_code_block",
    "syntax_error",
    "no_model_new",
)

DEFAULT_TASK_DESCRIPTION = (
    "Write a faster implementation of the PyTorch module `Model` below for an NVIDIA GPU."
)

EXEMPLAR_ORDERS: tuple[str, ...] = ("shuffled", "ascending", "descending")

# Language tags accepted on the fence of the final code block ("" is a bare ```).
_PYTHON_TAGS = frozenset({"", "python", "py", "python3"})


@dataclasses.dataclass(frozen=True)
class Exemplar:
    """An earlier implementation of a task and its measured speedup over the reference."""

    code: str
    speedup: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.speedup):
            raise ValueError(f"Exemplar speedup must be a finite number, got {self.speedup!r}")


@dataclasses.dataclass(frozen=True)
class ParsedResponse:
    """A response that follows the protocol; ``code`` defines a top-level ``class ModelNew``."""

    code: str
    analysis: str
    design: str


@dataclasses.dataclass(frozen=True)
class ParseFailure:
    """Why a response was rejected: ``reason`` is a stable metric key, ``detail`` explains it."""

    reason: str
    detail: str

    def __post_init__(self) -> None:
        if self.reason not in PARSE_FAILURE_REASONS:
            raise ValueError(
                f"unknown parse failure reason {self.reason!r}; expected one of {PARSE_FAILURE_REASONS}"
            )


# ---------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------

_PROTOCOL = (
    "Answer in exactly three sections, in this order:\n"
    "## Performance Analysis\n"
    "Where the reference spends its time and what limits it.\n"
    "## Algorithm Design\n"
    "The optimizations you apply and why they are faster.\n"
    "## Code Implementation\n"
    "One ```python code block with the complete module defining `class ModelNew`."
)

_REQUIREMENTS = (
    "Requirements and restrictions:\n"
    "- Exactly the same functionality: ModelNew must return the same outputs as Model for every "
    "input.\n"
    "- Keep all hyperparameters (sizes, constants, get_inputs, get_init_inputs) unchanged.\n"
    "- No caching or reuse of results from earlier calls: every call computes its outputs from "
    "its inputs.\n"
    "- Name the class ModelNew, with the same constructor signature as Model. Custom CUDA "
    "kernels (e.g. torch.utils.cpp_extension.load_inline) are allowed."
)


def _fence(code: str) -> str:
    """A backtick fence longer than any backtick run inside ``code`` (at least three)."""
    longest = max((len(m.group(0)) for m in re.finditer(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def _code_block(code: str) -> str:
    body = code.strip()
    fence = _fence(body)
    return f"{fence}python\n{body}\n{fence}"


def _check_reference(reference_source: str) -> str:
    if not reference_source.strip():
        raise ValueError("reference_source is empty; pass the task's reference module source")
    return reference_source


def sft_prompt(reference_source: str) -> str:
    """The reference code and the request for a faster, exactly equivalent ``ModelNew``."""
    ref = _check_reference(reference_source)
    return (
        "Rewrite the PyTorch module `Model` below as a faster, exactly equivalent implementation "
        "named `ModelNew` for an NVIDIA GPU.\n\n"
        f"Reference implementation:\n{_code_block(ref)}\n\n"
        f"{_PROTOCOL}\n\n"
        f"{_REQUIREMENTS}\n\n"
        f"{RESPONSE_MARKER}"
    )


def order_exemplars(exemplars: Sequence[Exemplar], order: str = "shuffled", seed: int = 0) -> list[Exemplar]:
    """The exemplars in the order a prompt shows them.

    ``"ascending"`` / ``"descending"``: by speedup (ties by code). ``"shuffled"``: a permutation
    drawn from ``seed`` and the exemplars' own content, so one exemplar set under one seed is
    always shown the same way (prompts stay reproducible) while the position of the fastest one
    carries no information across sets.
    """
    if order not in EXEMPLAR_ORDERS:
        raise ValueError(f"exemplar order must be one of {', '.join(EXEMPLAR_ORDERS)}, got {order!r}")
    ordered = sorted(exemplars, key=lambda e: (e.speedup, e.code))
    if order == "descending":
        ordered.reverse()
    elif order == "shuffled":
        digest = hashlib.sha256(repr((seed, [(e.code, e.speedup) for e in ordered])).encode()).digest()
        random.Random(int.from_bytes(digest[:8], "big")).shuffle(ordered)
    return ordered


_ORDER_NOTE = {"shuffled": "in random order", "ascending": "slowest first", "descending": "fastest first"}


def contrastive_prompt(
    reference_source: str,
    exemplars: Sequence[Exemplar],
    *,
    task_description: str | None = None,
    order: str = "shuffled",
    seed: int = 0,
) -> str:
    """Reference, earlier implementations with speedups, protocol, restrictions.

    Exemplars are shown in `order` (see `order_exemplars`) whatever order they are passed in.
    """
    ref = _check_reference(reference_source)
    description = (task_description or "").strip() or DEFAULT_TASK_DESCRIPTION
    ordered = order_exemplars(exemplars, order, seed)
    if ordered:
        shown = [
            f"### Implementation {i} (speedup {e.speedup:.2f}x)\n{_code_block(e.code)}"
            for i, e in enumerate(ordered, start=1)
        ]
        previous = (
            "Previous implementations, with their measured speedup over the reference "
            f"({_ORDER_NOTE[order]}):\n\n" + "\n\n".join(shown)
        )
    else:
        previous = "Previous implementations: none exist yet for this task."
    return (
        f"Task: {description}\n\n"
        f"Reference implementation:\n{_code_block(ref)}\n\n"
        f"{previous}\n\n"
        "Compare the implementations above: find what makes the faster ones faster, then write "
        "an implementation that is faster than all of them.\n\n"
        f"{_PROTOCOL}\n\n"
        f"{_REQUIREMENTS}\n\n"
        f"{RESPONSE_MARKER}"
    )


def format_response(analysis: str, design: str, code: str) -> str:
    """The canonical completion text for the three sections (used for SFT targets)."""
    return (
        f"## {SECTIONS[0]}\n{analysis.strip()}\n\n"
        f"## {SECTIONS[1]}\n{design.strip()}\n\n"
        f"## {SECTIONS[2]}\n```python\n{code.strip()}\n```\n"
    )


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_HEADING_RE = {
    title: re.compile(
        rf"^#{{2,4}}[ \t]*(?:\*\*)?[ \t]*{re.escape(title)}[ \t]*:?[ \t]*(?:\*\*)?[ \t]*:?[ \t]*$",
        re.MULTILINE | re.IGNORECASE,
    )
    for title in SECTIONS
}
_HEADING_ANY_CASE_RE = {
    title: re.compile(rf"^[#* \t]*{re.escape(title)}[ \t:*]*$", re.MULTILINE | re.IGNORECASE)
    for title in SECTIONS
}
_FENCE_OPEN_RE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.\-]*)[ \t]*$")
_FENCE_CLOSE_RE = re.compile(r"^[ \t]*```[ \t]*$")


@dataclasses.dataclass(frozen=True)
class _Block:
    lang: str
    body: str


def _missing_detail(text: str, missing: list[str]) -> str:
    names = ", ".join(f"'## {t}'" for t in missing)
    detail = f"missing heading {names} (each section starts with a line '## <title>')"
    hints = []
    for title in missing:
        m = _HEADING_ANY_CASE_RE[title].search(text)
        if m is not None:
            hints.append(
                f"found {m.group(0).strip()!r}, but the heading must be a line '## {title}'"
            )
    if hints:
        detail += "; " + "; ".join(hints)
    return detail


def _scan_blocks(section: str) -> tuple[list[_Block], int | None]:
    """Complete fenced blocks in ``section`` and the line (1-based) of an unclosed fence, if any."""
    blocks: list[_Block] = []
    open_lang: str | None = None
    open_line = 0
    body: list[str] = []
    for lineno, line in enumerate(section.split("\n"), start=1):
        if open_lang is None:
            m = _FENCE_OPEN_RE.match(line)
            if m is not None:
                open_lang, open_line, body = m.group(1).lower(), lineno, []
        elif _FENCE_CLOSE_RE.match(line):
            blocks.append(_Block(open_lang, "\n".join(body)))
            open_lang = None
        else:
            body.append(line)
    return blocks, (open_line if open_lang is not None else None)


def _defines_model_new(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def parse_response(text: str) -> ParsedResponse | ParseFailure:
    """Parse a completion; a ``ParseFailure`` names the first rule the text breaks.

    Rules, checked in this order: non-empty; the three ``## <title>`` headings present at line
    starts (two to four ``#``, any case, optional ``**bold**`` and trailing colon, trailing
    whitespace tolerated; the first occurrence of each counts); in protocol order; the Code Implementation section (everything after its heading)
    holds a closed fenced block tagged ``python``/``py`` or bare (the last complete one is used);
    the code parses with ``ast.parse``; it defines a top-level ``class ModelNew``.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return ParseFailure("empty", "the response is empty or whitespace only")

    found: dict[str, re.Match[str]] = {}
    for title in SECTIONS:
        m = _HEADING_RE[title].search(text)
        if m is not None:
            found[title] = m
    missing = [t for t in SECTIONS if t not in found]
    if missing:
        return ParseFailure("missing_section", _missing_detail(text, missing))

    starts = [found[t].start() for t in SECTIONS]
    if starts != sorted(starts):
        actual = " -> ".join(t for _, t in sorted(zip(starts, SECTIONS, strict=True)))
        expected = " -> ".join(SECTIONS)
        return ParseFailure(
            "sections_out_of_order", f"headings appear as {actual}; expected {expected}"
        )

    pa, ad, ci = (found[t] for t in SECTIONS)
    analysis = text[pa.end() : ad.start()].strip()
    design = text[ad.end() : ci.start()].strip()
    code_section = text[ci.end() :]

    blocks, unclosed_line = _scan_blocks(code_section)
    python_blocks = [b for b in blocks if b.lang in _PYTHON_TAGS]
    if not python_blocks:
        if unclosed_line is not None:
            return ParseFailure(
                "unterminated_code_block",
                f"the code block opened on line {unclosed_line} of the Code Implementation "
                "section is never closed with ``` (the response may have been cut off)",
            )
        if blocks:
            tags = ", ".join(sorted({repr(b.lang) for b in blocks}))
            return ParseFailure(
                "no_code_block",
                f"the Code Implementation section has code blocks tagged {tags} but none "
                "tagged ```python (or a bare ```)",
            )
        return ParseFailure(
            "no_code_block",
            "the Code Implementation section has no fenced ```python code block",
        )

    code = python_blocks[-1].body.strip()
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return ParseFailure("syntax_error", f"the code does not parse: line {e.lineno}: {e.msg}")
    except ValueError as e:  # e.g. NUL bytes in the source
        return ParseFailure("syntax_error", f"the code does not parse: {e}")
    if not _defines_model_new(tree):
        return ParseFailure(
            "no_model_new", "the code parses but defines no top-level `class ModelNew`"
        )
    return ParsedResponse(code=code, analysis=analysis, design=design)
