"""Prompt templates and strict response parsing (learner.rl.prompts)."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learner.rl.prompts import (
    PARSE_FAILURE_REASONS,
    PROMPT_VERSION,
    RESPONSE_MARKER,
    SECTIONS,
    Exemplar,
    ParsedResponse,
    ParseFailure,
    contrastive_prompt,
    format_response,
    order_exemplars,
    parse_response,
    sft_prompt,
)

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [2.0]
"""

MODEL_NEW_SOURCES = [
    "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n",
    "class ModelNew:\n    pass",
    "import torch\n\n\nclass Helper:\n    pass\n\n\nclass ModelNew(torch.nn.Module):\n"
    "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n"
    "    def forward(self, x):\n        # fused relu-scale\n        return x.clamp_min(0) * self.scale\n",
    "\n\n  \nclass ModelNew(object):\n    '''doc with ## inside'''\n    x = 1\n\n\n",
]

# Free text for the analysis/design sections: no line may start with "##" (that would be a
# heading) and no carriage returns (the parser normalises line endings).
_text = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\r"),
    max_size=200,
).filter(lambda s: not any(line.startswith("##") for line in s.split("\n")))


@settings(max_examples=200, deadline=None)
@given(analysis=_text, design=_text, code=st.sampled_from(MODEL_NEW_SOURCES))
def test_format_parse_round_trip(analysis: str, design: str, code: str) -> None:
    text = format_response(analysis, design, code)
    parsed = parse_response(text)
    assert isinstance(parsed, ParsedResponse), parsed
    assert parsed.code == code.strip()
    assert parsed.analysis == analysis.strip()
    assert parsed.design == design.strip()
    assert text.startswith("## Performance Analysis\n")


def test_format_response_layout() -> None:
    text = format_response(" slow loads ", "fuse", "class ModelNew:\n    pass\n")
    assert text == (
        "## Performance Analysis\nslow loads\n\n## Algorithm Design\nfuse\n\n"
        "## Code Implementation\n```python\nclass ModelNew:\n    pass\n```\n"
    )


def _resp(code_section: str, analysis: str = "a", design: str = "d") -> str:
    return (
        f"## Performance Analysis\n{analysis}\n\n## Algorithm Design\n{design}\n\n"
        f"## Code Implementation\n{code_section}"
    )


GOOD = "```python\nclass ModelNew:\n    pass\n```\n"

FAILURES = {
    "empty": ["", "  \n\t\n"],
    "missing_section": [
        "## Performance Analysis\nx\n## Code Implementation\n" + GOOD,
        _resp(GOOD).replace("## Algorithm Design", "# Algorithm Design"),
        _resp(GOOD).replace("## Performance Analysis", "Performance Analysis"),
        _resp(GOOD).replace("## Code Implementation", "## Code Implementation here"),
        _resp(GOOD).replace("## Code Implementation", "##### Code Implementation"),
        GOOD,
    ],
    "sections_out_of_order": [
        "## Algorithm Design\nd\n## Performance Analysis\na\n## Code Implementation\n" + GOOD,
        "## Performance Analysis\na\n## Code Implementation\n" + GOOD + "## Algorithm Design\nd\n",
    ],
    "no_code_block": [
        _resp("class ModelNew:\n    pass\n"),
        _resp("```cpp\nint main() {}\n```\n"),
        _resp(""),
    ],
    "unterminated_code_block": [
        _resp("```python\nclass ModelNew:\n    pass\n"),
        _resp("Here:\n```\nclass ModelNew:\n"),
    ],
    "syntax_error": [
        _resp("```python\nclass ModelNew(:\n    pass\n```\n"),
        _resp("```python\ndef f(:\n```"),
    ],
    "no_model_new": [
        _resp("```python\nclass Model:\n    pass\n```\n"),
        _resp(
            "```python\ndef build():\n    class ModelNew:\n        pass\n    return ModelNew\n```"
        ),
        _resp("```python\nModelNew = int\n```\n"),
    ],
}


def test_every_failure_reason_has_cases() -> None:
    assert set(FAILURES) == set(PARSE_FAILURE_REASONS)


@pytest.mark.parametrize(
    ("reason", "text"), [(r, t) for r, texts in FAILURES.items() for t in texts]
)
def test_failure_reasons(reason: str, text: str) -> None:
    result = parse_response(text)
    assert isinstance(result, ParseFailure), result
    assert result.reason == reason, result
    assert result.detail


def test_failure_details_are_specific() -> None:
    missing = parse_response("## Performance Analysis\nx\n## Code Implementation\n" + GOOD)
    assert isinstance(missing, ParseFailure)
    assert "## Algorithm Design" in missing.detail
    assert "## Performance Analysis" not in missing.detail

    one_hash = parse_response(_resp(GOOD).replace("## Algorithm Design", "# algorithm design"))
    assert isinstance(one_hash, ParseFailure)
    assert "# algorithm design" in one_hash.detail  # points at what was found instead
    bare = parse_response(_resp(GOOD).replace("## Performance Analysis", "Performance Analysis:"))
    assert isinstance(bare, ParseFailure) and "'Performance Analysis:'" in bare.detail

    order = parse_response(
        "## Algorithm Design\nd\n## Performance Analysis\na\n## Code Implementation\n" + GOOD
    )
    assert isinstance(order, ParseFailure)
    assert "Algorithm Design -> Performance Analysis -> Code Implementation" in order.detail

    other_lang = parse_response(_resp("```cpp\nint main() {}\n```\n"))
    assert isinstance(other_lang, ParseFailure)
    assert "'cpp'" in other_lang.detail

    syntax = parse_response(_resp("```python\nimport torch\nclass ModelNew(:\n    pass\n```\n"))
    assert isinstance(syntax, ParseFailure)
    assert "line 2" in syntax.detail


def test_parse_failure_rejects_unknown_reason() -> None:
    with pytest.raises(ValueError, match="unknown parse failure reason"):
        ParseFailure("bad_reason", "x")


def test_last_complete_code_block_wins() -> None:
    section = (
        "First attempt:\n```python\nclass ModelNew:\n    first = 1\n```\n"
        "Some CUDA source:\n```cuda\n__global__ void k() {}\n```\n"
        "Final:\n```\nclass ModelNew:\n    final = 2\n```\nDone.\n"
        "```python\nclass ModelNew:  # truncated\n"
    )
    parsed = parse_response(_resp(section))
    assert isinstance(parsed, ParsedResponse)
    assert parsed.code == "class ModelNew:\n    final = 2"


def test_tolerated_variants() -> None:
    # Trailing whitespace after headings, CRLF line endings, text before the first heading,
    # a bare ``` fence, and "##" comments inside the code are all fine.
    code = "## Code Implementation\nclass ModelNew:\n    pass"
    text = (
        "Sure.\r\n## Performance Analysis  \r\nmemory bound\r\n## Algorithm Design\t\r\nfuse\r\n"
        f"## Code Implementation \r\n```\r\n{code}\r\n```\r\n"
    )
    parsed = parse_response(text)
    assert isinstance(parsed, ParsedResponse), parsed
    assert parsed.code == code
    assert parsed.analysis == "memory bound"
    assert parsed.design == "fuse"


@pytest.mark.parametrize(
    "heading",
    ["## {t}:", "### {t}", "#### {t}:", "## {l}", "## **{t}**", "## **{t}:**", "##{t}", "### {t} :"],
)
def test_heading_variants_are_accepted(heading: str) -> None:
    # The paper's own responses use "## Performance Analysis:"; models also emit ### and bold.
    text = "\n".join(
        [heading.format(t=SECTIONS[0], l=SECTIONS[0].lower()), "memory bound",
         heading.format(t=SECTIONS[1], l=SECTIONS[1].lower()), "fuse",
         heading.format(t=SECTIONS[2], l=SECTIONS[2].lower()), GOOD]
    )
    parsed = parse_response(text)
    assert isinstance(parsed, ParsedResponse), (heading, parsed)
    assert parsed.analysis == "memory bound" and parsed.design == "fuse"
    assert parsed.code == "class ModelNew:\n    pass"


def test_parsed_code_is_valid_python() -> None:
    parsed = parse_response(format_response("a", "d", MODEL_NEW_SOURCES[2]))
    assert isinstance(parsed, ParsedResponse)
    names = [n.name for n in ast.parse(parsed.code).body if isinstance(n, ast.ClassDef)]
    assert names == ["Helper", "ModelNew"]


# ---------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------

RESTRICTION_PHRASES = (
    "Exactly the same functionality",
    "hyperparameters",
    "No caching or reuse of results from earlier calls",
    "ModelNew",
    "same constructor signature",
)


def _assert_common(prompt: str) -> None:
    assert REFERENCE.strip() in prompt
    for title in SECTIONS:
        assert f"## {title}" in prompt
    positions = [prompt.index(f"## {t}") for t in SECTIONS]
    assert positions == sorted(positions)
    for phrase in RESTRICTION_PHRASES:
        assert phrase in prompt, phrase
    assert prompt.endswith(RESPONSE_MARKER)
    assert prompt.endswith("\nResponse:\n")


def test_sft_prompt() -> None:
    prompt = sft_prompt(REFERENCE)
    _assert_common(prompt)
    assert sft_prompt(REFERENCE) == prompt
    assert len(prompt) < len(REFERENCE) + 1500  # boilerplate stays compact


def test_contrastive_prompt_shows_exemplars_in_speedup_order() -> None:
    fast = Exemplar("class ModelNew:\n    fast = True\n", 2.5)
    slow = Exemplar("class ModelNew:\n    slow = True\n", 1.0625)
    mid = Exemplar("class ModelNew:\n    mid = True\n", 1.37)
    prompt = contrastive_prompt(REFERENCE, [fast, slow, mid], task_description="Speed up ReLU.",
                                order="ascending")
    _assert_common(prompt)
    assert "Speed up ReLU." in prompt and "(slowest first)" in prompt
    assert (
        "### Implementation 1 (speedup 1.06x)\n```python\nclass ModelNew:\n    slow = True\n```"
        in prompt
    )
    assert (
        "### Implementation 2 (speedup 1.37x)\n```python\nclass ModelNew:\n    mid = True\n```"
        in prompt
    )
    assert (
        "### Implementation 3 (speedup 2.50x)\n```python\nclass ModelNew:\n    fast = True\n```"
        in prompt
    )
    # Examples come after the reference and before the protocol.
    assert (
        prompt.index(REFERENCE.strip())
        < prompt.index("Implementation 1")
        < prompt.index("## Performance Analysis")
    )
    # Deterministic, and independent of the order the exemplars are passed in.
    assert (
        contrastive_prompt(REFERENCE, [slow, mid, fast], task_description="Speed up ReLU.",
                           order="ascending")
        == prompt
    )
    assert "none exist" not in prompt
    desc = contrastive_prompt(REFERENCE, [slow, mid, fast], order="descending")
    assert desc.index("fast = True") < desc.index("mid = True") < desc.index("slow = True")


def test_shuffled_order_is_reproducible_and_carries_no_position_signal() -> None:
    # Default order: shuffled, the same for the same set and seed whatever order it is passed in,
    # and over many exemplar sets the fastest one is not always last.
    a, b = Exemplar("class ModelNew:\n    a = 1\n", 1.0), Exemplar("class ModelNew:\n    b = 1\n", 3.0)
    p = contrastive_prompt(REFERENCE, [a, b])
    assert "(in random order)" in p and p == contrastive_prompt(REFERENCE, [b, a])
    fastest_last = 0
    for i in range(40):
        slow = Exemplar(f"class ModelNew:\n    slow = {i}\n", 0.5)
        fast = Exemplar(f"class ModelNew:\n    fast = {i}\n", 2.0)
        shown = order_exemplars([slow, fast], "shuffled", seed=0)
        assert sorted(shown, key=lambda e: e.speedup) == [slow, fast]
        fastest_last += shown[-1] is fast
    assert 8 <= fastest_last <= 32, fastest_last
    with pytest.raises(ValueError, match="exemplar order"):
        contrastive_prompt(REFERENCE, [a], order="best-first")


def test_contrastive_prompt_default_description_and_zero_exemplars() -> None:
    prompt = contrastive_prompt(REFERENCE, [])
    _assert_common(prompt)
    assert "none exist yet" in prompt
    assert "### Implementation" not in prompt
    assert prompt.startswith("Task: ")
    assert contrastive_prompt(REFERENCE, []) == prompt
    assert contrastive_prompt(REFERENCE, [], task_description="  ") == prompt


def test_prompt_fence_survives_backticks_in_code() -> None:
    code = 'class ModelNew:\n    doc = """```python\nnot a fence```"""\n'
    prompt = contrastive_prompt(REFERENCE, [Exemplar(code, 1.5)])
    assert "````python\n" + code.strip() + "\n````" in prompt


def test_prompt_validation() -> None:
    with pytest.raises(ValueError, match="reference_source is empty"):
        sft_prompt("  \n")
    with pytest.raises(ValueError, match="reference_source is empty"):
        contrastive_prompt("", [])
    with pytest.raises(ValueError, match="finite"):
        Exemplar("class ModelNew: pass", float("nan"))


def test_prompt_version_is_recorded_string() -> None:
    assert isinstance(PROMPT_VERSION, str) and PROMPT_VERSION == "v2"
    assert SECTIONS == ("Performance Analysis", "Algorithm Design", "Code Implementation")
