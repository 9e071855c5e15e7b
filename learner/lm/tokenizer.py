"""Tokenizer wrapper over `tokenizers` with HF special-token / EOS discovery.

EOS ids are the union of (in this order): generation_config.json `eos_token_id`, config.json
`eos_token_id`, and the id of tokenizer_config.json `eos_token`. An Instruct checkpoint's chat
template (tokenizer_config.json `chat_template`, or chat_template.jinja) is kept and rendered by
`apply_chat_template` / `encode_prompt(text, chat=True)`; plain `encode` is plain text;
`add_bos` prepends the BOS id when the model has one and the tokenizer's
post-processor did not already add it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

log = logging.getLogger(__name__)


class TokenizerError(ValueError):
    """The tokenizer directory is missing files or names tokens its vocabulary does not have."""


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _token_content(tok: Any) -> str | None:
    if tok is None:
        return None
    if isinstance(tok, dict):
        return tok.get("content")
    return str(tok)


def _chat_template(tcfg: dict[str, Any], jinja_file: Path) -> str | None:
    """tokenizer_config.json `chat_template` (a string, or a list of named templates: "default"),
    else a chat_template.jinja next to it, else None."""
    t = tcfg.get("chat_template")
    if isinstance(t, list):
        named = {x.get("name"): x.get("template") for x in t if isinstance(x, dict)}
        t = named.get("default") or next(iter(named.values()), None)
    if isinstance(t, str) and t:
        return t
    return jinja_file.read_text() if jinja_file.is_file() else None


def _as_id_list(x: Any) -> list[int]:
    if x is None:
        return []
    if isinstance(x, list | tuple):
        return [int(i) for i in x]
    return [int(x)]


@dataclasses.dataclass
class Tokenizer:
    """Encode/decode plus the ids generation needs (eos_ids, bos_id, pad_id)."""

    tok: HFTokenizer
    eos_ids: list[int]
    bos_id: int | None = None
    pad_id: int | None = None
    special_tokens: dict[str, str] = dataclasses.field(default_factory=dict)
    chat_template: str | None = None  # Jinja template of an Instruct checkpoint

    @classmethod
    def from_dir(cls, directory: str | Path) -> Tokenizer:
        d = Path(directory)
        tj = d / "tokenizer.json"
        if not tj.is_file():
            raise TokenizerError(f"no tokenizer.json in {d}")
        return cls.from_files(
            tj,
            tokenizer_config=d / "tokenizer_config.json",
            generation_config=d / "generation_config.json",
            model_config=d / "config.json",
        )

    @classmethod
    def from_files(
        cls,
        tokenizer_json: str | Path,
        *,
        tokenizer_config: str | Path | None = None,
        generation_config: str | Path | None = None,
        model_config: str | Path | None = None,
    ) -> Tokenizer:
        tok = HFTokenizer.from_file(str(tokenizer_json))
        tcfg = _read_json(Path(tokenizer_config)) if tokenizer_config else {}
        gcfg = _read_json(Path(generation_config)) if generation_config else {}
        mcfg = _read_json(Path(model_config)) if model_config else {}

        special: dict[str, str] = {}
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            content = _token_content(tcfg.get(key))
            if content is not None:
                special[key] = content

        def token_id(key: str) -> int | None:
            content = special.get(key)
            if content is None:
                return None
            tid = tok.token_to_id(content)
            if tid is None:
                raise TokenizerError(f"{key} {content!r} from tokenizer_config.json not in vocab")
            return tid

        eos: list[int] = []
        for cand in (
            _as_id_list(gcfg.get("eos_token_id")),
            _as_id_list(mcfg.get("eos_token_id")),
            _as_id_list(token_id("eos_token")),
        ):
            eos += [i for i in cand if i not in eos]
        bos_list = _as_id_list(gcfg.get("bos_token_id")) or _as_id_list(mcfg.get("bos_token_id"))
        bos = bos_list[0] if bos_list else token_id("bos_token")
        pad_list = _as_id_list(gcfg.get("pad_token_id")) or _as_id_list(mcfg.get("pad_token_id"))
        pad = pad_list[0] if pad_list else token_id("pad_token")
        if not eos:
            log.warning("no EOS token found for %s; generation stops only on length", tokenizer_json)
        template = _chat_template(tcfg, Path(tokenizer_json).parent / "chat_template.jinja")
        return cls(tok=tok, eos_ids=eos, bos_id=bos, pad_id=pad, special_tokens=special,
                   chat_template=template)

    def apply_chat_template(self, user_text: str, system: str | None = None) -> str:
        """The prompt text an Instruct checkpoint expects: one user turn (after an optional
        system turn) and the opening of the assistant's turn (`add_generation_prompt`).

        Rendered like transformers does: a sandboxed Jinja environment with `messages`,
        `add_generation_prompt`, the special tokens and `raise_exception`."""
        if not self.chat_template:
            raise TokenizerError("this tokenizer has no chat template")
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user_text}]
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=True, **self.special_tokens)

    def encode_prompt(self, text: str, *, chat: bool) -> list[int]:
        """A prompt's ids: through the chat template when `chat` (and one exists), else plain
        text after BOS."""
        if chat and self.chat_template:
            return self.encode(self.apply_chat_template(text), add_special_tokens=False)
        return self.encode(text, add_bos=True)

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = True, add_bos: bool = False) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=add_special_tokens).ids
        if add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def encode_batch(self, texts: list[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(self, batch: list[list[int]], *, skip_special_tokens: bool = True) -> list[str]:
        return self.tok.decode_batch([list(b) for b in batch], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)
