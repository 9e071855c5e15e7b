"""The learner's front door: --help, config validation at start, resume compatibility, export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from configs import demo
from learner.cli import main
from learner.config_check import TrainConfigError, resume_conflicts, validate_config

REPO = Path(__file__).resolve().parents[2]
DEMO = str(REPO / "configs" / "demo.py")


@pytest.mark.parametrize("argv", [["train", "--help"], ["train", "-h"], ["eval", "--help"],
                                  ["experiment", "--help"], ["train", "--config", DEMO, "--help"]])
def test_help_lists_commands_fields_choices_and_an_example(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: learner {argv[0]} --config FILE")
    assert "commands: train, eval, export, experiment" in out
    assert "--config.rl.overlap='auto'   one of: auto, on, off" in out
    assert "--config.rl.exemplar_order='shuffled'   one of: shuffled, ascending, descending" in out
    assert "example:\n  learner " in out
    if argv[0] == "eval":
        assert "--checkpoint DIR" in out
    if DEMO in argv:  # the given file's defaults, not configs/common.py's
        assert "--config.tasks.programs='mixture'" in out


def _leaves(cfg, prefix=""):
    for key, value in cfg.items():
        if hasattr(value, "items"):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize(("argv", "config"), [
    (["train", "--help"], "common"), (["train", "--config", DEMO, "--help"], "demo"),
    (["experiment", "--help"], "speed_mixture")])
def test_help_gives_every_field_its_default_and_a_one_line_description(argv, config, capsys):
    import importlib

    module = importlib.import_module(f"configs.{config}")
    cfg = module.base_config() if config == "common" else module.get_config()
    assert main(argv) == 0
    lines = {line.split("=", 1)[0].removeprefix("  --config."): line
             for line in capsys.readouterr().out.splitlines() if line.startswith("  --config.")}
    leaves = dict(_leaves(cfg))
    assert set(lines) == set(leaves)
    for field, value in leaves.items():
        default, sep, description = lines[field].partition(f"={value!r}   ")
        assert sep, f"{field}: its default {value!r} is not shown: {lines[field]}"
        assert len(description.strip()) >= 8, f"{field} has no description: {lines[field]}"


def test_descriptions_come_from_the_config_files_own_comments(tmp_path):
    from learner.config_docs import descriptions_for, field_descriptions

    f = tmp_path / "mine.py"
    f.write_text(
        "def get_config():\n"
        "    c = base_config()\n"
        "    c.rl.group_size = 16  # a note on this value, not the field's description\n"
        "    # Several lines of explanation. Only the first sentence is the one-line description.\n"
        "    c.mine = ml_collections.ConfigDict()\n"
        "    c.mine.speed = 3  # how fast\n"
        "    c.mine.quiet = True\n"
        "    return c\n")
    own = field_descriptions(f)
    assert own == {"rl.group_size": "a note on this value, not the field's description",
                   "mine": "Several lines of explanation", "mine.speed": "how fast"}
    merged = descriptions_for(f)
    assert merged["rl.group_size"] == "samples per prompt (the GRPO group)"  # configs/common.py's
    assert merged["mine.speed"] == "how fast" and "mine.quiet" not in merged


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("train", "eval", "export", "experiment", "exemplars", "bench"):
        assert cmd in out


def test_config_errors_are_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^learner train: config file .*nope\.py does not exist$"):
        main(["train", "--config", str(tmp_path / "nope.py")])
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", DEMO, "--config.rl.gruop_size=3"])
    msg = str(e.value.code)
    assert "\\n" not in msg and "\\'" not in msg and "\n" not in msg  # not an escaped repr
    assert 'Did you mean "group_size"' in msg
    # a bad choice is refused at start, before any stage runs (and nothing is written)
    with pytest.raises(SystemExit, match=r"config\.rl\.overlap='of': must be one of auto, on, off"):
        main(["train", "--config", DEMO, "--config.rl.overlap=of", f"--config.workdir={tmp_path / 'w'}"])
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(("field", "value", "match"), [
    ("rl.exemplar_rule", "best", "bucket, random"),
    ("stages", "sft,ppo", "comma list"),
    ("stages", "rl,sft", "order"),
    ("eval.prompts", "plain,fancy", "plain, exemplars"),
    ("sampling.max_new_tokens", 5000, "below max_seq_len"),
    ("rl.group_size", 1, "at least 2"),
    ("sampling.top_p", 1.5, r"\(0, 1\]"),
    ("rl.tau", 0.0, "> 0"),
    ("tasks.programs", "all", "fast, mixture"),
    ("distributed.mode", "of", "auto, on, off"),
    ("rl.reference_dtype", "bf16", "compute, float32"),
    ("train.memory_headroom", 1.5, r"\(0, 1\]"),
    ("sft.decay_steps", 10_000, "must not exceed sft.steps"),
    ("sft.decay_steps", -1, ">= 0"),
])
def test_validate_config_names_the_field(field, value, match):
    cfg = demo.get_config()
    validate_config(cfg)  # the demo itself is valid
    node = cfg
    *parents, last = field.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    with pytest.raises(TrainConfigError, match=match) as e:
        validate_config(cfg)
    assert f"config.{field}=" in str(e.value)


def test_resume_refuses_moves_of_step_numbers_but_allows_the_last_stage():
    old = json.loads(demo.get_config().to_json_best_effort())
    cfg = demo.get_config()
    assert resume_conflicts(old, cfg) == []
    cfg.rl.steps = 50  # the last stage may grow
    cfg.rl.learning_rate = 1e-5  # and hyperparameters may change
    assert resume_conflicts(old, cfg) == []
    cfg.sft.steps = 10  # moves every later step number
    cfg.model.hidden_size = 64
    problems = resume_conflicts(old, cfg)
    assert any("stage sft had 240 steps, now 10" in p for p in problems)
    assert any("model.hidden_size was 128, now 64" in p for p in problems)
    cfg = demo.get_config()
    cfg.stages = "sft,selfsup"
    assert any("stages were sft,selfsup,rl, now sft,selfsup" in p for p in resume_conflicts(old, cfg))


def test_train_refuses_an_incompatible_resume_unless_forced(tmp_path):
    from learner.stages.run import open_run

    cfg = demo.get_config()
    cfg.workdir = str(tmp_path)
    (tmp_path / "ckpt" / "sft").mkdir(parents=True)
    old = demo.get_config()
    old.sft.steps = 999
    (tmp_path / "config.json").write_text(old.to_json_best_effort())
    with pytest.raises(TrainConfigError, match="stage sft had 999 steps, now 240.*resume_force=True"):
        open_run(cfg)
    assert json.loads((tmp_path / "config.json").read_text())["sft"]["steps"] == 999  # left as it was


@pytest.mark.slow  # fits a tokenizer, builds a model and imports transformers: about 30-60 s
def test_export_writes_a_model_transformers_loads_with_matching_logits(tmp_path):
    import jax
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learner.export import export_checkpoint
    from learner.runtime.checkpoint import Checkpointer
    from learner.stages.run import _corpus, open_run
    from learner.stages.state import fresh_state

    cfg = demo.get_config()
    cfg.workdir = str(tmp_path / "run")
    cfg.model.vocab_size = 400
    cfg.model.hidden_size = 32
    cfg.model.intermediate_size = 64
    cfg.model.num_layers = 1
    run = open_run(cfg)
    try:
        # a "trained" checkpoint: the initial params moved away from their init
        params = jax.tree.map(lambda x: x + 0.01, nnx.state(run.policy.model))
        state = fresh_state(run, "rl", params)
        with Checkpointer(run.workdir / "ckpt" / "rl", async_save=False) as ck:
            ck.save(state, force=True)
        model = nnx.merge(nnx.graphdef(run.policy.model), params)
        tokens = np.asarray([run.encode_prompt(_corpus(run.tasks)[0][:200])[:24]])
        want = np.asarray(jax.jit(lambda m, t: m(t))(model, tokens))
    finally:
        run.close()
    out = export_checkpoint(tmp_path / "run" / "ckpt" / "rl", tmp_path / "hf")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        got = hf(torch.as_tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
    tok = AutoTokenizer.from_pretrained(str(out))
    text = "class ModelNew(nn.Module):"
    assert tok.decode(tok(text)["input_ids"]) == text

    assert main(["export", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
