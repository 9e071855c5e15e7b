"""Tokenizer wrapper vs transformers.PreTrainedTokenizerFast on a tiny self-built BPE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from learner.lm.tokenizer import Tokenizer, TokenizerError

CORPUS = [
    "__global__ void add(float* a, float* b, float* c, int n) {",
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;",
    "  if (i < n) c[i] = a[i] + b[i];",
    "}",
    "def kernel(x): return x * 2 + 1",
] * 20

TEXTS = [
    "int i = blockIdx.x;",
    "c[i] = a[i] * b[i] + 1;",
    "__global__ void mul(float* x) {}",
    "unseen wörds ünïcode ✓",
]


def build_tokenizer_dir(path: Path) -> Path:
    tok = HFTokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_end|>", "<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|endoftext|>", "bos_token": "<s>", "pad_token": "<|endoftext|>"})
    )
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 0]}))
    return path


def test_encode_decode_matches_transformers(tmp_path: Path) -> None:
    d = build_tokenizer_dir(tmp_path / "tok")
    ours = Tokenizer.from_dir(d)
    ref = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text)
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True) == text
    assert ours.encode_batch(TEXTS) == [ref.encode(t) for t in TEXTS]
    assert ours.decode_batch(ours.encode_batch(TEXTS)) == TEXTS


def test_special_token_ids(tmp_path: Path) -> None:
    d = build_tokenizer_dir(tmp_path / "tok")
    (d / "config.json").write_text(json.dumps({"eos_token_id": 1, "bos_token_id": 2}))
    t = Tokenizer.from_dir(d)
    eot = t.token_to_id("<|endoftext|>")
    assert eot == 0
    assert t.eos_ids == [1, 0]  # generation_config order first, then config/tokenizer_config
    assert t.bos_id == 2 and t.pad_id == 0
    assert t.encode("int", add_bos=True)[0] == 2
    assert t.decode([*t.encode("int i"), eot]) == "int i"
    assert t.decode([*t.encode("int i"), eot], skip_special_tokens=False).endswith("<|endoftext|>")


def test_missing_files_raise(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        Tokenizer.from_dir(tmp_path)
    d = build_tokenizer_dir(tmp_path / "tok")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(TokenizerError, match="not in vocab"):
        Tokenizer.from_dir(d)


CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.mark.parametrize("where", ["tokenizer_config", "jinja_file"])
def test_chat_template_renders_like_transformers(tmp_path: Path, where: str) -> None:
    d = build_tokenizer_dir(tmp_path / "tok")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    if where == "tokenizer_config":
        cfg["chat_template"] = [{"name": "default", "template": CHATML}, {"name": "tool_use", "template": "x"}]
    else:
        (d / "chat_template.jinja").write_text(CHATML)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours = Tokenizer.from_dir(d)
    ref = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))
    ref.chat_template = CHATML
    msgs = [{"role": "system", "content": "be fast"}, {"role": "user", "content": TEXTS[0]}]
    want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ours.apply_chat_template(TEXTS[0], system="be fast") == want
    assert ours.encode_prompt(TEXTS[0], chat=True) == ours.encode(
        ours.apply_chat_template(TEXTS[0]), add_special_tokens=False)
    assert ours.encode_prompt(TEXTS[0], chat=False) == ours.encode(TEXTS[0], add_bos=True)


def test_without_a_template_prompts_stay_plain_text(tmp_path: Path) -> None:
    t = Tokenizer.from_dir(build_tokenizer_dir(tmp_path / "tok"))
    assert t.chat_template is None
    assert t.encode_prompt(TEXTS[1], chat=True) == t.encode(TEXTS[1], add_bos=True)
    with pytest.raises(TokenizerError, match="no chat template"):
        t.apply_chat_template("x")
