"""Validation of a run's config before anything starts, and resume compatibility.

`validate_config` checks every choice field, count and cross-field rule at start, so a typo in
``--config.rl.overlap=of`` is a one-line error before SFT, not a crash when RL begins.
`resume_conflicts` compares the config recorded in a workdir with the new one: a change that
moves step numbers (a stage's length, when a later stage follows) or changes the weights' shapes
would make resume restore the wrong checkpoint or delete the wrong exemplar rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learner.rl.prompts import EXEMPLAR_ORDERS
from learner.runtime import compile_cache

STAGES = ("sft", "selfsup", "rl")
EVAL_FORMS = ("plain", "exemplars")


class TrainConfigError(ValueError):
    """The run configuration is inconsistent."""


# field -> allowed values (also listed by `learner train --help`)
CHOICES: dict[str, tuple[Any, ...]] = {
    "tasks.variant_device": ("auto", "cpu", "cuda", "any"),
    "tasks.programs": ("fast", "mixture"),
    "model.param_dtype": ("float32", "bfloat16", "float16"),
    "model.compute_dtype": ("float32", "bfloat16", "float16"),
    "model.attention_impl": ("auto", "cudnn", "xla"),
    "model.chat_template": ("auto", "off"),
    "distributed.mode": ("auto", "on", "off"),
    "rl.overlap": ("auto", "on", "off"),
    "sampling.engine": ("static", "continuous"),
    "rl.reference_dtype": ("compute", "float32", "bfloat16", "float16"),
    "rl.exemplar_rule": ("bucket", "random"),
    "rl.exemplar_order": EXEMPLAR_ORDERS,
    "rl.grpo.kl_estimator": ("k1", "k2", "k3"),
    "rl.grpo.aggregation": ("token", "sequence"),
    "farm.local_device": ("auto", "cpu", "cuda"),
    "farm.local_sandbox": ("best", "strong"),
}
LISTS: dict[str, tuple[str, ...]] = {"stages": STAGES, "eval.prompts": EVAL_FORMS}

POSITIVE_INTS = ("max_seq_len", "sampling.max_new_tokens", "sampling.batch_size", "sampling.engine_chunk",
                 "sampling.steps_per_check",
                 "sft.batch_size",
                 "selfsup.samples_per_task", "selfsup.batch_size", "selfsup.passes", "rl.tasks_per_step",
                 "rl.group_size", "eval.samples_per_task", "farm.local_daemons", "farm.local_slots",
                 "keep_checkpoints", "checkpoint_every", "sft.checkpoint_every",
                 "distributed.heartbeat_timeout_s")
NON_NEGATIVE = ("sft.steps", "selfsup.rounds", "rl.steps", "rl.num_exemplars", "eval.num_exemplars",
                "sft.warmup_steps", "sft.decay_steps", "sft.learning_rate", "selfsup.learning_rate", "rl.learning_rate",
                "rl.grpo.kl_coef", "sampling.temperature", "train.micro_batch_tokens",
                "train.device_memory_gb", "distributed.wait_timeout_s")
POSITIVE_FLOATS = ("rl.tau", "rl.bucket_width", "rl.reward_clip", "sampling.top_p")

# Fields whose change makes an existing workdir's checkpoints / database rows wrong for the run.
WEIGHT_FIELDS = ("model.hf_dir", "model.vocab_size", "model.hidden_size", "model.intermediate_size",
                 "model.num_layers", "model.num_heads", "model.num_kv_heads", "init_from")


def get(cfg: Any, path: str) -> Any:
    node = cfg
    for part in path.split("."):
        node = node[part]
    return node


def _err(path: str, value: Any, why: str) -> TrainConfigError:
    return TrainConfigError(f"config.{path}={value!r}: {why}")


def _items(value: Any) -> list[str]:
    return [s.strip() for s in str(value).split(",") if s.strip()]


def validate_config(cfg: Any) -> None:
    """Raise `TrainConfigError` (one line, naming the field) for the first bad value."""
    for path, allowed in CHOICES.items():
        v = get(cfg, path)
        if v not in allowed:
            raise _err(path, v, f"must be one of {', '.join(map(str, allowed))}")
    for path, allowed in LISTS.items():
        items = _items(get(cfg, path))
        bad = [s for s in items if s not in allowed]
        if bad or not items or len(set(items)) != len(items):
            raise _err(path, get(cfg, path), f"use a comma list of distinct {', '.join(allowed)}")
    stages = _items(cfg.stages)
    if stages != sorted(stages, key=STAGES.index):
        raise _err("stages", cfg.stages, f"stages run in the order {', '.join(STAGES)}")
    for path in POSITIVE_INTS:
        if int(get(cfg, path)) <= 0:
            raise _err(path, get(cfg, path), "must be > 0")
    for path in NON_NEGATIVE:
        if float(get(cfg, path)) < 0:
            raise _err(path, get(cfg, path), "must be >= 0")
    for path in POSITIVE_FLOATS:
        if not float(get(cfg, path)) > 0:
            raise _err(path, get(cfg, path), "must be > 0")
    if "sft" in stages and int(cfg.sft.decay_steps) and (
            int(cfg.sft.warmup_steps) + int(cfg.sft.decay_steps) > int(cfg.sft.steps)):
        raise _err("sft.decay_steps", cfg.sft.decay_steps,
                   f"warmup_steps + decay_steps must not exceed sft.steps={cfg.sft.steps}")
    cache = compile_cache.cache_dir_for(cfg.jax_cache_dir, cfg.workdir)
    if cache is not None and cache.exists() and not cache.is_dir():
        raise _err("jax_cache_dir", cfg.jax_cache_dir, f"names {cache}, which is a file; use a directory, "
                   f"\"\" (${compile_cache.CACHE_ENV} or <workdir>/jax-cache) or \"{compile_cache.OFF}\"")
    if not 0 < float(cfg.train.memory_headroom) <= 1:
        raise _err("train.memory_headroom", cfg.train.memory_headroom, "must be in (0, 1]")
    if float(cfg.sampling.top_p) > 1:
        raise _err("sampling.top_p", cfg.sampling.top_p, "must be in (0, 1]")
    if int(cfg.sampling.max_new_tokens) >= int(cfg.max_seq_len):
        raise _err("sampling.max_new_tokens", cfg.sampling.max_new_tokens,
                   f"must be below max_seq_len={cfg.max_seq_len} (the prompt needs room)")
    if "rl" in stages and int(cfg.rl.group_size) < 2:
        raise _err("rl.group_size", cfg.rl.group_size, "GRPO needs at least 2 samples per prompt")
    if cfg.init_from and "sft" in stages and stages[0] != "sft":
        raise _err("init_from", cfg.init_from, "init_from applies to the first stage")
    if cfg.model.hf_dir:
        problem = hf_dir_problem(str(cfg.model.hf_dir))
        if problem:
            raise _err("model.hf_dir", cfg.model.hf_dir, problem)
    if not cfg.model.hf_dir and int(cfg.model.hidden_size) % int(cfg.model.num_heads):
        raise _err("model.hidden_size", cfg.model.hidden_size, f"must be a multiple of num_heads={cfg.model.num_heads}")


def hf_dir_form_problem(path: str) -> str | None:
    """Why ``path`` cannot be a checkpoint directory the loader reads, by its form alone (a URL),
    or None."""
    scheme = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", path)
    if scheme:
        return (f"the loader reads a local directory (config.json, *.safetensors, tokenizer.json), not a "
                f"{scheme.group(1)}:// URL: copy the checkpoint to local disk first (e.g. gsutil -m cp -r "
                f"{path} /mnt/models/) and give that path")
    return None


def hf_dir_problem(path: str) -> str | None:
    """Why the loader cannot read ``path`` as a Hugging Face checkpoint directory, or None."""
    form = hf_dir_form_problem(path)
    if form:
        return form
    d = Path(path).expanduser()
    if not d.is_dir():
        return "no such directory"
    missing = [name for name in ("config.json", "tokenizer.json") if not (d / name).is_file()]
    if missing:
        return f"not a Hugging Face checkpoint directory (no {' or '.join(missing)} in it)"
    return None


def _lookup(d: Mapping[str, Any], path: str) -> Any:
    node: Any = d
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _stage_lengths(get_: Any) -> dict[str, int]:
    out = {}
    for s in _items(get_("stages") or ""):
        if s == "sft":
            out[s] = int(get_("sft.steps") or 0)
        elif s == "selfsup":
            out[s] = int(get_("selfsup.rounds") or 0) * int(get_("selfsup.passes") or get_("selfsup.steps_per_round") or 0)
        else:
            out[s] = int(get_("rl.steps") or 0)
    return out


def resume_conflicts(recorded: Mapping[str, Any], cfg: Any) -> list[str]:
    """What in `cfg` is incompatible with the run recorded in `recorded` (its config.json).

    Allowed: extending or shortening the *last* stage, and any field that changes neither the
    step numbering nor the weights (learning rates, farm, eval, sampling...)."""
    problems = []
    for path in WEIGHT_FIELDS + ("seed", "tasks.ids", "tasks.suite", "tasks.programs", "tasks.heldout"):
        old, new = _lookup(recorded, path), get(cfg, path)
        if old is not None and old != new:
            problems.append(f"{path} was {old!r}, now {new!r}")
    old_len = _stage_lengths(lambda p: _lookup(recorded, p))
    new_len = _stage_lengths(lambda p: get(cfg, p))
    if list(old_len) != list(new_len):
        problems.append(f"stages were {','.join(old_len)}, now {','.join(new_len)}")
    else:
        for stage in list(new_len)[:-1]:  # a change before the last stage moves every later step
            if old_len[stage] != new_len[stage]:
                problems.append(f"stage {stage} had {old_len[stage]} steps, now {new_len[stage]} "
                                "(later stages' step numbers would move)")
    return problems


def describe_fields(cfg: Any, descriptions: Mapping[str, str] | None = None, prefix: str = "") -> list[str]:
    """'--config.path=default   (one of ...) description' for every field, and a line naming each
    section with its description (``descriptions``: learner.config_docs.descriptions_for)."""
    out = []
    descriptions = descriptions or {}
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if hasattr(value, "items") and not isinstance(value, str | bytes):
            about = descriptions.get(path)
            out.append(f"  {path}:" + (f" {about}" if about else ""))
            out += describe_fields(value, descriptions, f"{path}.")
            continue
        line = f"  --config.{path}={value!r}"
        notes = []
        if path in CHOICES:
            notes.append(f"one of: {', '.join(map(str, CHOICES[path]))}.")
        elif path in LISTS:
            notes.append(f"comma list of: {', '.join(LISTS[path])}.")
        if descriptions.get(path):
            notes.append(descriptions[path])
        if notes:
            line += "   " + " ".join(notes)
        out.append(line)
    return out


def load_config_file(path: str) -> Any:
    """`get_config()` of a config .py file (what --config loads, without the flag machinery)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_learner_config_file", path)
    if spec is None or spec.loader is None:
        raise TrainConfigError(f"{path} is not a Python config file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise TrainConfigError(f"{path} defines no get_config()")
    return module.get_config()
