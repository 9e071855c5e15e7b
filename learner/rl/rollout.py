"""Rollouts: prompts in, parsed completions out; and the padded token batches the trainer steps on.

A `Rollout` is one sampled response with everything the update needs later: the prompt and
completion token ids, the behaviour policy's per-token log-probs (for the importance ratio),
the policy version that produced it, and the parsed code or the reason it did not parse.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import jax
import numpy as np

from learner.lm.engine import ContinuousSampler
from learner.lm.sampler import Sampler, SampleResult, SamplingConfig
from learner.lm.sharding import batch_size_multiple
from learner.lm.tokenizer import Tokenizer
from learner.rl.prompts import ParseFailure, parse_response
from learner.runtime import controller


@dataclasses.dataclass
class Prompt:
    """One response to sample: its sample id, its task, its group (the samples of one prompt
    share a group) and the prompt's token ids."""

    sample_id: str
    task_id: str
    group: int
    token_ids: list[int]


def repeat_prompt(prefix: str, task_id: str, group: int, token_ids: list[int], n: int) -> list[Prompt]:
    """`n` samples of one prompt, with sample ids `{prefix}-{group}-{k}` for k < n."""
    return [Prompt(f"{prefix}-{group}-{k}", task_id, group, token_ids) for k in range(n)]


@dataclasses.dataclass
class Rollout:
    sample_id: str
    task_id: str
    group: int  # samples of the same prompt share a group
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: np.ndarray  # [len(completion_ids)] float32, behaviour policy at T=1
    policy_version: int
    text: str
    code: str  # "" when the response did not parse
    parse_failure: str = ""  # learner.rl.prompts.PARSE_FAILURE_REASONS key
    finish_reason: str = ""


@dataclasses.dataclass
class GenerationStats:
    seconds: float
    new_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def generate_rollouts(
    sampler: Sampler,
    tokenizer: Tokenizer,
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    rng: jax.Array,
    *,
    policy_version: int,
    batch_size: int,
) -> tuple[list[Rollout], GenerationStats]:
    """One rollout per `Prompt`, in order. Generates in fixed-size batches
    (the last one padded by repeating its first prompt) so every batch compiles once. When the
    prompts come in runs of G equal ones (GRPO's samples of one prompt) and G divides the batch
    size, each run shares one prefill (`Sampler.generate(group=G)`). A `ContinuousSampler` takes
    every prompt in one call and keeps its own rows busy (equal prompts refilled together share
    one prefill).

    Several processes (`learner.runtime.controller`): every process passes the same `prompts`;
    each generates its contiguous share of every batch's rows and the results are gathered in
    process order, so every process returns the same rollouts."""
    out: list[Rollout] = []
    t0 = time.perf_counter()
    new_tokens = 0
    share = _run_length(prompts)
    share = share if share > 1 and batch_size % share == 0 else 1
    if isinstance(sampler, ContinuousSampler):  # its own rows: every prompt in one call
        batch_size = max(1, len(prompts))
    for start in range(0, len(prompts), batch_size):
        chunk = list(prompts[start:start + batch_size])
        real = len(chunk)
        if not isinstance(sampler, ContinuousSampler):  # a fixed shape: compiles once
            chunk += [chunk[0]] * (batch_size - real)
        res = generate_rows(sampler, [p.token_ids for p in chunk], sampling, jax.random.fold_in(rng, start),
                             share)
        comps = res.completions()
        texts = tokenizer.decode_batch(comps[:real])
        for i in range(real):
            p = chunk[i]
            parsed = parse_response(texts[i])
            n = int(res.lengths[i])
            new_tokens += n
            out.append(Rollout(
                sample_id=p.sample_id, task_id=p.task_id, group=p.group, prompt_ids=list(p.token_ids),
                completion_ids=comps[i], logprobs=np.asarray(res.logprobs[i, :n], np.float32),
                policy_version=policy_version, text=texts[i],
                code="" if isinstance(parsed, ParseFailure) else parsed.code,
                parse_failure=parsed.reason if isinstance(parsed, ParseFailure) else "",
                finish_reason=res.finish_reasons[i],
            ))
    return out, GenerationStats(time.perf_counter() - t0, new_tokens)


FINISH_REASONS = ("eos", "stop", "length")


def generate_rows(sampler: Sampler, rows: list[list[int]], sampling: SamplingConfig, rng: jax.Array,
                   group: int) -> SampleResult:
    """`sampler.generate` on a global batch of rows: in one process all of them; across processes
    each generates its share (`controller.local_slice`) and the results are gathered in process
    order. Whether rows share a prefill is decided on the whole batch, so every process compiles
    the same program."""
    if not controller.multi_process():
        return sampler.generate(rows, sampling, rng, group=group)
    mine = rows[controller.local_slice(len(rows))]
    shards = batch_size_multiple(sampler.mesh) // jax.process_count() if sampler.mesh is not None else 1
    if group > 1 and (len(mine) % group or (len(mine) // group) % max(1, shards)
                      or not all(rows[i] == rows[i - i % group] for i in range(len(rows)))):
        group = 1  # the distinct prompts of every process must split over its batch shards
    res = sampler.generate(mine, sampling, rng, group=group)
    codes = np.array([FINISH_REASONS.index(r) for r in res.finish_reasons], np.int32)
    return SampleResult(tokens=controller.gather_rows(res.tokens), logprobs=controller.gather_rows(res.logprobs),
                        lengths=controller.gather_rows(res.lengths),
                        finish_reasons=[FINISH_REASONS[c] for c in controller.gather_rows(codes)])


def _run_length(prompts: Sequence[Prompt]) -> int:
    """How many prompts in a row equal the first one (the group size of GRPO's prompt list)."""
    n = 0
    while n < len(prompts) and list(prompts[n].token_ids) == list(prompts[0].token_ids):
        n += 1
    return n


def length_bucket(n: int, max_len: int, step: int = 128) -> int:
    """Round up to a multiple of `step` (at most `max_len`): few shapes, little padding."""
    return min(max(step, -(-n // step) * step), max_len)


class LengthGroupedSampler:
    """Batches of rows that share a padded length, so a batch of short rows is not padded to the
    longest row of the data set (SFT data mixes ~500-token plain prompts with ~1000-token prompts
    that show exemplars: padding everything to the longest cost about a third of every step).

    Rows are grouped by `length_bucket(len, max_len, step)`; a batch picks a group with probability
    proportional to its size, then `batch_size` rows of that group (with replacement only when the
    group is smaller). Every row is still drawn with probability batch_size / N per step; only
    which rows share a batch changes. Few groups (step 256) keep the compiled shapes few."""

    def __init__(self, lengths: Sequence[int], batch_size: int, max_len: int, step: int = 256) -> None:
        if not lengths:
            raise ValueError("no rows to batch")
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            groups.setdefault(length_bucket(n, max_len, step), []).append(i)
        self.lengths = sorted(groups)
        self.groups = [np.asarray(groups[k]) for k in self.lengths]
        sizes = np.array([len(g) for g in self.groups], np.float64)
        self.weights = sizes / sizes.sum()
        self.batch_size = batch_size

    def sample(self, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """(row indices, padded length) of one batch."""
        k = int(rng.choice(len(self.groups), p=self.weights))
        group = self.groups[k]
        return rng.choice(group, size=self.batch_size, replace=len(group) < self.batch_size), self.lengths[k]


def lm_batch(rows: Sequence[tuple[list[int], list[int]]], pad_id: int, max_len: int,
             length: int | None = None) -> dict[str, np.ndarray]:
    """(prompt ids, completion ids) rows -> right-padded tokens and a completion-only loss mask.

    `length` fixes the padded length (one compiled shape); by default it is bucketed."""
    length = length or length_bucket(max(len(p) + len(c) for p, c in rows), max_len)
    tokens = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), np.float32)
    for r, (p, c) in enumerate(rows):
        seq = (list(p) + list(c))[:length]
        tokens[r, :len(seq)] = seq
        mask[r, len(p):len(seq)] = 1.0
    return {"tokens": tokens, "loss_mask": mask}


def grpo_batch(
    rollouts: Sequence[Rollout], advantages: np.ndarray, valid: np.ndarray, pad_id: int, max_len: int
) -> dict[str, np.ndarray]:
    """Tokens, completion mask (zero for invalid samples), behaviour log-probs and advantages."""
    batch = lm_batch([(r.prompt_ids, r.completion_ids) for r in rollouts], pad_id, max_len)
    old = np.zeros_like(batch["loss_mask"])
    for i, r in enumerate(rollouts):
        p = len(r.prompt_ids)
        n = min(len(r.logprobs), old.shape[1] - p)
        old[i, p:p + n] = r.logprobs[:n]
        if not valid[i]:
            batch["loss_mask"][i] = 0.0
    batch["old_logprobs"] = old
    batch["advantages"] = np.asarray(advantages, np.float32)
    return batch
