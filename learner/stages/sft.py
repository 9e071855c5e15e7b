"""The SFT stage: masked cross-entropy on (prompt, known program) pairs (`sft_pairs`), in batches
of one padded length; and the LM loss the self-supervised stage shares."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

import jax

from learner.config_check import TrainConfigError
from learner.rl.prompts import Exemplar
from learner.rl.rollout import LengthGroupedSampler, lm_batch
from learner.rl.tasks import SFTPair, exemplars_for_sft, read_jsonl_pairs, sft_pairs_for
from learner.runtime import scale
from learner.runtime.losses import lm_loss_sum_count
from learner.runtime.train_step import TrainState, learning_rate_schedule
from learner.stages.programs import known_programs
from learner.stages.run import Run
from learner.stages.samples import np_rng
from learner.stages.specs import SFTSpec
from learner.stages.state import checkpointer, progress, save_checkpoint

log = logging.getLogger(__name__)


def run_sft(run: Run, spec: SFTSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.steps` AdamW steps on batches of (prompt, known program) pairs of one padded length."""
    rows = _sft_rows(run)
    log.info("SFT on %d pairs for %d steps", len(rows), spec.steps)
    lr_at = learning_rate_schedule(spec.optimizer)
    loss_fn = lm_loss()
    batches = LengthGroupedSampler([len(p) + len(c) for p, c in rows], spec.batch_size, int(run.cfg.max_seq_len))
    with checkpointer(run, spec.name) as ck, progress(run, spec.steps, start, spec.name) as bar:
        for step in range(start, spec.steps):
            state, m = _sft_step(run, spec, state, rows, batches, step, loss_fn)
            m["learning_rate"] = float(lr_at(step))
            run.writer.write(spec.offset + step + 1, m, stage=spec.name)
            bar.set_postfix(loss=f"{m['loss']:.3f}")
            bar.update(1)
            if (step + 1) % 10 == 0 and not run.cfg.progress:
                log.info("sft step %d/%d loss %.4f (%.2fs/step)", step + 1, spec.steps, m["loss"], m["step_s"])
            save_checkpoint(ck, state, spec.checkpoint_every, spec.steps)
    return state


def _sft_step(run: Run, spec: SFTSpec, state: TrainState, rows: Sequence[tuple[list[int], list[int]]],
              batches: LengthGroupedSampler, step: int, loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """One SFT step on a batch drawn for global step `spec.offset + step`."""
    pick, length = batches.sample(np_rng(run, spec.offset + step, 0))
    t0 = time.perf_counter()
    batch = lm_batch([rows[i] for i in pick], run.policy.pad_id, int(run.cfg.max_seq_len), length)
    state, m = scale.step(state, batch, loss_fn, scale.micro_batch_tokens(run.cfg))
    m = {k: float(v) for k, v in jax.device_get(m).items()}
    m["step_s"] = time.perf_counter() - t0
    return state, m


def _sft_rows(run: Run) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) of every SFT pair that fits `max_seq_len`."""
    rows = []
    for p in sft_pairs(run):
        prompt, comp = run.encode_prompt(p.prompt), run.encode_completion(p.completion)
        if len(prompt) + len(comp) > int(run.cfg.max_seq_len):  # user-supplied pairs
            log.warning("SFT pair for %s is %d tokens > max_seq_len; skipped", p.task_id, len(prompt) + len(comp))
            continue
        rows.append((prompt, comp))
    if not rows:
        raise TrainConfigError("every SFT pair is longer than max_seq_len")
    return rows


def sft_pairs(run: Run) -> list[SFTPair]:
    """Every known program under the plain prompt and the contrastive prompt (with no exemplars,
    and with exemplars drawn uniformly from the task's scored programs), except the fast programs
    of held-out tasks (those appear only as exemplars in evaluation prompts, never in SFT data)."""
    progs, measured = known_programs(run), run.measured
    used = [t for t in progs if not (t.task.task_id in run.heldout and t.kind == "fast")]
    n = int(run.cfg.rl.num_exemplars) or int(run.cfg.eval.num_exemplars)
    pairs = []
    for t in used:
        scored = [Exemplar(p.code.strip(), measured[p.sha]) for p in used
                  if p.task.task_id == t.task.task_id and p.sha in measured]
        pairs += sft_pairs_for(t, exemplars_for_sft(t, scored, n) if n > 0 else [])
    if run.cfg.tasks.sft_jsonl:
        pairs += read_jsonl_pairs(run.cfg.tasks.sft_jsonl, run.task_by_id)
    if not pairs:
        raise TrainConfigError("no SFT data: the task set has no shipped fast variants for this "
                               "device and config.tasks.sft_jsonl is empty")
    return pairs


def lm_loss() -> Any:
    """The SFT and self-supervised loss (one per stage, as a static argument of the step)."""
    return functools.partial(lm_loss_sum_count, chunk_size=512)
