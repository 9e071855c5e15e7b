"""A small byte-level BPE tokenizer trained on the task suite, for models trained from scratch.

Real runs load the pretrained model's own `tokenizer.json`. The demo trains a tiny model from
random weights, and a vocabulary fitted to the suite's code and the prompt templates keeps its
sequences short (a few hundred tokens per prompt). The result is written as a Hugging Face
tokenizer directory, so it loads through `learner.lm.tokenizer.Tokenizer.from_dir` like any other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from learner.lm.tokenizer import Tokenizer

log = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Tokenizer:
    """Fit a byte-level BPE on `texts`, save it under `out_dir`, and load it back."""
    out = Path(out_dir)
    if (out / "tokenizer.json").is_file():
        return Tokenizer.from_dir(out)
    if vocab_size < 300:
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level BPE (need >= 300)")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "tokenizer.json.tmp"
    tok.save(str(tmp))
    (out / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}, indent=1)
    )
    tmp.rename(out / "tokenizer.json")
    loaded = Tokenizer.from_dir(out)
    log.info("trained a %d-token BPE tokenizer -> %s", loaded.vocab_size, out)
    return loaded
