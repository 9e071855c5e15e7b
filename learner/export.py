"""`learner export`: a stage checkpoint as a Hugging Face model directory.

    learner export --checkpoint runs/demo/ckpt/rl --out hf/demo-rl [--step N] [--dtype bfloat16]

Writes ``config.json``, safetensors weights (sharded with an index when large) and the run's
tokenizer (``tokenizer.json`` and its config), so that ``transformers`` and other HF tools load
the policy directly. The model shape and tokenizer come from the run the checkpoint belongs to
(``<workdir>/config.json``, written by `learner train`), or from ``--config``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import types
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json")


class ExportError(ValueError):
    """The checkpoint cannot be exported as given."""


def build_parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--checkpoint", required=True, help="a stage checkpoint directory (<workdir>/ckpt/<stage>)")
    p.add_argument("--out", required=True, help="output directory for the HF model")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    p.add_argument("--config", default=None,
                   help="the run's config: a config.json or a config .py file (default: <workdir>/config.json)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"], help="on-disk dtype (default: params')")
    return p


def _load_config(path: Path) -> Any:
    import ml_collections

    if path.suffix == ".py":
        from learner.config_check import load_config_file

        return load_config_file(str(path))
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, step: int | None = None,
                      config: str | Path | None = None, dtype: str | None = None) -> Path:
    """Write the checkpoint's params with the run's model config and tokenizer under `out`."""
    from flax import nnx

    from learner.lm.hf_io import save_hf_model
    from learner.runtime.policy import build_policy
    from learner.stages.state import load_stage_params

    ckpt = Path(checkpoint)
    if not ckpt.is_dir():
        raise ExportError(f"checkpoint directory {ckpt} does not exist")
    workdir = ckpt.parent.parent  # <workdir>/ckpt/<stage>
    cfg_path = Path(config) if config else workdir / "config.json"
    if not cfg_path.is_file():
        raise ExportError(f"no run config at {cfg_path}: pass --config (the run's config.json or .py file)")
    cfg = _load_config(cfg_path)
    tok_dir = Path(cfg.model.hf_dir) if cfg.model.hf_dir else workdir / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():
        raise ExportError(f"no tokenizer.json in {tok_dir}: export from the run's own workdir")
    policy = build_policy(cfg, workdir, [])  # the scratch tokenizer already exists: it is reused
    shim = types.SimpleNamespace(cfg=cfg, policy=policy)
    params = load_stage_params(shim, ckpt, step)  # type: ignore[arg-type]
    model = nnx.merge(policy.graphdef, params)
    out = Path(out)
    files = save_hf_model(model, out, dtype=dtype)
    for name in TOKENIZER_FILES:
        if (tok_dir / name).is_file():
            shutil.copyfile(tok_dir / name, out / name)
    tc = out / "tokenizer_config.json"
    tok_cfg = json.loads(tc.read_text()) if tc.is_file() else {}
    tok_cfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    tc.write_text(json.dumps(tok_cfg, indent=1))
    log.info("exported %s (%d weight files) to %s", ckpt, len(files), out)
    return out


def run(args: argparse.Namespace) -> int:
    from learner.config_check import TrainConfigError

    try:
        out = export_checkpoint(args.checkpoint, args.out, step=args.step, config=args.config, dtype=args.dtype)
    except (ExportError, TrainConfigError) as err:
        print(f"learner export: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.checkpoint} -> {out}")
    return 0
