"""The trainer's small parts: task sets, SFT data, batches, stage bookkeeping, the tokenizer."""

from __future__ import annotations

import json

import ml_collections
import numpy as np
import pytest

from configs import demo
from learner.config_check import TrainConfigError
from learner.rl.farm import FarmOutcome
from learner.rl.prompts import Exemplar, contrastive_prompt, parse_response, sft_prompt
from learner.rl.rewards import RewardRule, rewards
from learner.rl.rollout import LengthGroupedSampler, Rollout, grpo_batch, length_bucket, lm_batch
from learner.rl.tasks import (
    TaskSetError,
    builtin_sft_targets,
    exemplars_for_sft,
    load_task_set,
    read_jsonl_pairs,
    renamed_reference,
    sft_pairs_for,
    slowed_reference,
    task_programs,
)
from learner.runtime.train_step import OptimizerConfig, learning_rate_schedule
from learner.stages.samples import outcome_metrics
from learner.stages.specs import stage_list, stage_offsets, stage_steps


def test_task_set_by_ids_and_errors():
    tasks = load_task_set("builtin", "L1/1, L2/6")
    assert [t.task_id for t in tasks] == ["L1/1", "L2/6"]
    assert "class Model" in tasks[0].source
    assert len(load_task_set("builtin", "")) >= 24
    with pytest.raises(TaskSetError, match="no task"):
        load_task_set("builtin", "L9/99")
    with pytest.raises(TaskSetError, match="not a KernelBench checkout"):
        load_task_set("/nonexistent/kb", "")


def test_sft_targets_are_correct_variants_and_parse():
    tasks = load_task_set("builtin", "L1/1,L2/6")
    targets = builtin_sft_targets(tasks, "cpu")
    assert {t.task.task_id for t in targets} == {"L1/1", "L2/6"}
    assert {t.kind for t in targets} == {"fast"}
    for t in targets:
        parsed = parse_response(t.completion)
        assert parsed.code == t.code.strip()  # the completion round-trips through the parser
        pairs = sft_pairs_for(t)
        assert [p.prompt for p in pairs] == [sft_prompt(t.task.source), contrastive_prompt(t.task.source, [])]
        # no pair shows the target itself as an exemplar (that would teach copying)
        assert all(t.code.strip() not in p.prompt for p in pairs)
    # CUDA-only variants are not SFT data for a CPU farm, and are for a CUDA one.
    cuda_tasks = [t for t in load_task_set("builtin", "")]
    n_cpu = len(builtin_sft_targets(cuda_tasks, "cpu"))
    n_cuda = len(builtin_sft_targets(cuda_tasks, "cuda"))
    n_any = len(builtin_sft_targets(cuda_tasks, "any"))
    assert n_cuda > n_cpu > n_any > 0


def test_program_mixture_programs_are_distinct_and_parse():
    tasks = load_task_set("builtin", "L1/2,L2/6,L1/8")
    progs = task_programs(tasks, "any", mixture=True)
    for t in tasks:
        mine = [p for p in progs if p.task == t]
        assert {p.kind for p in mine} == {"reference", "slowed", "fast", "wrong"}
        assert len({p.sha for p in mine}) == len(mine) and len({p.name for p in mine}) == len(mine)
        for p in mine:
            parsed = parse_response(p.completion)
            assert parsed.code == p.code.strip()
        # exemplars for the contrastive SFT pair: drawn uniformly, whatever the target
        pool = [Exemplar(p.code.strip(), float(i + 1)) for i, p in enumerate(mine) if p.kind != "wrong"]
        shown = exemplars_for_sft(mine[0], pool, 2)
        assert len(shown) == 2 and shown == exemplars_for_sft(mine[0], pool, 2)  # reproducible
        third = sft_pairs_for(mine[0], shown)[2]
        assert all(e.code in third.prompt for e in shown) and third.completion == mine[0].completion
        ref = next(p for p in mine if p.kind == "reference")
        assert "class ModelNew" in ref.code and "get_inputs" not in ref.code and "class Model(" not in ref.code
        slow = next(p for p in mine if p.kind == "slowed")
        assert "def _forward(" in slow.code and slow.code.count("self._forward(*args)") == 2


def test_sft_exemplars_are_not_chosen_by_target_or_speed():
    tasks = load_task_set("builtin", "L1/1,L1/2,L1/4,L2/6,L2/7,L2/3,L1/8")
    progs = [p for p in task_programs(tasks, "any", mixture=True) if p.kind != "wrong"]
    shown_target = shown_fastest = 0
    for p in progs:
        pool = [Exemplar(q.code.strip(), 1.0 + i) for i, q in enumerate(progs) if q.task == p.task]
        shown = exemplars_for_sft(p, pool, 2)
        shown_target += any(e.code == p.code.strip() for e in shown)
        shown_fastest += any(e.speedup == max(x.speedup for x in pool) for e in shown)
    n = len(progs)  # 3 correct programs per task, 2 shown: each is shown with probability 2/3
    assert n / 3 < shown_target < n and n / 3 < shown_fastest < n


def test_renamed_and_slowed_reference_compute_the_reference_output():
    import torch

    for tid in ("L1/2", "L2/6"):
        task = load_task_set("builtin", tid)[0]
        ns: dict = {}
        exec(compile(task.source, "ref", "exec"), ns)  # noqa: S102 - the suite's own task file
        torch.manual_seed(0)
        inputs = [x[:8] if x.dim() else x for x in ns["get_inputs"]()]
        want = ns["Model"](*ns["get_init_inputs"]())(*inputs)
        for make in (renamed_reference, slowed_reference):
            cand: dict = {}
            exec(compile(make(task.source), "cand", "exec"), cand)  # noqa: S102
            got = cand["ModelNew"](*ns["get_init_inputs"]())(*inputs)
            torch.testing.assert_close(got, want)


def test_jsonl_pairs_both_forms_and_errors(tmp_path):
    tasks = {t.task_id: t for t in load_task_set("builtin", "L1/1")}
    f = tmp_path / "pairs.jsonl"
    f.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n\n"
                 + json.dumps({"task": "L1/1", "code": "class ModelNew: pass"}) + "\n")
    pairs = read_jsonl_pairs(f, tasks)
    assert pairs[0].prompt == "p" and pairs[1].task_id == "L1/1"
    assert "class Model" in pairs[1].prompt and "class ModelNew: pass" in pairs[1].completion
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p"}\n')
    with pytest.raises(TaskSetError, match=r"bad.jsonl:1: need string fields"):
        read_jsonl_pairs(bad, tasks)
    bad.write_text("{nope\n")
    with pytest.raises(TaskSetError, match=r":1: not JSON"):
        read_jsonl_pairs(bad, tasks)
    bad.write_text(json.dumps({"task": "L3/1", "code": "x"}) + "\n")
    with pytest.raises(TaskSetError, match="not in the configured task set"):
        read_jsonl_pairs(bad, tasks)
    with pytest.raises(TaskSetError, match="does not exist"):
        read_jsonl_pairs(tmp_path / "missing.jsonl", tasks)


def test_lm_batch_masks_only_the_completion():
    b = lm_batch([([1, 2, 3], [4, 5]), ([6], [7, 8, 9])], pad_id=0, max_len=1024)
    assert b["tokens"].shape == (2, 128)
    assert b["tokens"][0, :5].tolist() == [1, 2, 3, 4, 5] and b["tokens"][0, 5:].max() == 0
    assert b["loss_mask"][0, :6].tolist() == [0, 0, 0, 1, 1, 0]
    assert b["loss_mask"][1, :5].tolist() == [0, 1, 1, 1, 0]
    assert length_bucket(129, 1024) == 256 and length_bucket(5000, 1024) == 1024


def test_length_grouped_batches_share_a_padded_length_and_draw_every_row_evenly():
    lengths = [470, 500, 530, 600, 620, 900, 950, 1030, 1100, 300]
    sampler = LengthGroupedSampler(lengths, batch_size=3, max_len=1152)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(lengths))
    for _ in range(6000):
        pick, length = sampler.sample(rng)
        assert len(pick) == 3 and length in (512, 768, 1024, 1152)
        assert all(length_bucket(lengths[i], 1152, 256) == length for i in pick)  # one group per batch
        np.add.at(counts, pick, 1)
    # each row's share of draws is batch_size / N per step, whatever its group's size
    np.testing.assert_allclose(counts / 6000, 3 / len(lengths), rtol=0.12)
    with pytest.raises(ValueError, match="no rows"):
        LengthGroupedSampler([], 2, 128)


def test_learning_rate_schedule_warms_up_holds_and_decays_to_zero():
    lr = learning_rate_schedule(OptimizerConfig(learning_rate=1e-3, warmup_steps=10, decay_steps=40,
                                                total_steps=100))
    got = [float(lr(s)) for s in (0, 5, 10, 59, 60, 80, 100)]
    np.testing.assert_allclose(got, [0.0, 5e-4, 1e-3, 1e-3, 1e-3, 5e-4, 0.0], atol=1e-9)
    const = learning_rate_schedule(OptimizerConfig(learning_rate=2e-4))
    assert float(const(0)) == float(const(10_000)) == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="must not exceed total_steps"):
        learning_rate_schedule(OptimizerConfig(learning_rate=1e-3, warmup_steps=10, decay_steps=95,
                                               total_steps=100))


def test_grpo_batch_aligns_behaviour_logprobs_and_drops_invalid_rows():
    def ro(i: int, prompt: list[int], comp: list[int]) -> Rollout:
        return Rollout(f"s{i}", "L1/1", 0, prompt, comp, np.arange(1, len(comp) + 1, dtype=np.float32) * -0.1,
                       0, "", "")

    rows = [ro(0, [1, 2], [3, 4, 5]), ro(1, [1, 2, 3, 4], [6])]
    b = grpo_batch(rows, np.array([0.5, -0.5]), np.array([True, False]), pad_id=0, max_len=256)
    assert b["old_logprobs"][0, 2:5].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert b["old_logprobs"][0, :2].tolist() == [0, 0]
    assert b["loss_mask"][0].sum() == 3 and b["loss_mask"][1].sum() == 0  # invalid: no tokens
    assert b["advantages"].tolist() == [0.5, -0.5]


def test_stage_bookkeeping_from_config():
    cfg = demo.get_config()
    assert stage_list(cfg) == ["sft", "selfsup", "rl"]
    offsets = stage_offsets(cfg)
    assert offsets["selfsup"] == stage_steps(cfg, "sft")
    assert offsets["rl"] == stage_steps(cfg, "sft") + cfg.selfsup.rounds * cfg.selfsup.passes
    cfg.stages = "rl,sft"
    with pytest.raises(TrainConfigError, match="order"):
        stage_list(cfg)
    cfg.stages = "sft,ppo"
    with pytest.raises(TrainConfigError, match="comma list"):
        stage_list(cfg)


def test_demo_config_is_locked_against_typos():
    cfg = demo.get_config()
    cfg.lock()
    with pytest.raises(AttributeError):
        cfg.rl.gruop_size = 3  # noqa: B018 - the typo is the point
    assert isinstance(cfg, ml_collections.ConfigDict)


def test_outcome_metrics_counts_verdicts_parse_failures_and_speedups():
    outs = [FarmOutcome("a", "OK", 2.0, latency_s=1.0), FarmOutcome("b", "OK", 4.0, latency_s=3.0),
            FarmOutcome("c", "INCORRECT", latency_s=2.0), FarmOutcome("d", "HACK_DETECTED", hack_reason="x"),
            FarmOutcome("e", "PARSE_FAILURE", detail="no_code_block")]
    m = outcome_metrics(outs)
    assert m["samples"] == 5 and m["success_rate"] == pytest.approx(0.4)
    assert m["verdict/OK"] == 2 and m["hacks"] == 1 and m["parse_failure/no_code_block"] == 1
    assert m["speedup_mean"] == pytest.approx(3.0) and m["speedup_max"] == 4.0
    assert m["farm_latency_s"] == pytest.approx(1.5)  # parse failures never reached the farm


def test_rewards_leave_infra_out_and_score_failures_zero():
    outs = [FarmOutcome("a", "OK", 3.0), FarmOutcome("b", "OK", 1.5), FarmOutcome("c", "INCORRECT"),
            FarmOutcome("d", "PARSE_FAILURE", detail="no_code_block"), FarmOutcome("e", "HACK_DETECTED"),
            FarmOutcome("f", "INFRA_ERROR"), FarmOutcome("g", "LOST")]
    assert rewards(outs, RewardRule("success")) == [1.0, 1.0, 0.0, 0.0, 0.0, None, None]
    assert rewards(outs, RewardRule("speedup", clip=2.0)) == [2.0, 1.5, 0.0, 0.0, 0.0, None, None]


def test_scratch_tokenizer_round_trips_code(tmp_path):
    from learner.lm.vocab import train_tokenizer

    tasks = load_task_set("builtin", "L1/1,L2/6")
    texts = [t.source for t in tasks] * 3
    tok = train_tokenizer(texts, 400, tmp_path / "tok")
    assert tok.eos_ids and tok.pad_id is not None and tok.vocab_size <= 400
    src = tasks[0].source
    assert tok.decode(tok.encode(src)) == src
    again = train_tokenizer(texts, 400, tmp_path / "tok")  # an existing tokenizer is reused
    assert again.encode(src) == tok.encode(src)
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(texts, 100, tmp_path / "tok2")


def test_cli_config_errors_are_messages_not_tracebacks():
    from pathlib import Path

    from learner.cli import main

    demo_file = str(Path(__file__).resolve().parents[2] / "configs" / "demo.py")
    with pytest.raises(SystemExit, match="gruop_size"):
        main(["train", "--config", demo_file, "--config.rl.gruop_size=3"])
    with pytest.raises(SystemExit, match="invalid literal"):
        main(["train", "--config", demo_file, "--config.rl.group_size=abc"])
    with pytest.raises(SystemExit, match="--config is required"):
        main(["train"])
