"""`evalfarm score` and `evalfarm tasks` as a kernel engineer meets them: help texts, batch inputs
checked up front, a directory of candidates for one task, resuming only what is the same, the
phases of a score, and Ctrl-C / SIGTERM (one line, exit 130, no process left behind)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalfarm.cli import build_parser, main
from evalfarm.config import ScoreConfig
from evalfarm.engineer import batch, batch_resume
from evalfarm.engineer.batch_resume import Identity
from evalfarm.result import Evidence, ScoreResult, TimingEvidence, describe
from evalfarm.score_progress import PhasePrinter, extra_checks
from evalfarm.server.cli import DEFAULTS
from evalfarm.tasks.format import parse_task
from evalfarm.verdict import Verdict
from tests.service.conftest import descendants, process_state

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
TASK = str(DATA / "task_scale.py")
QUICK = ["--inputs", "40", "--budget", "1"]
COMMANDS = ("score", "tasks", "serve", "status")


# --- help texts ------------------------------------------------------------------------------
def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _option_blocks(text: str) -> dict[str, str]:
    """Each option of a help text and its description (its lines after the flags, joined)."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.split("options:", 1)[1].splitlines():
        if re.match(r"^  -", line):
            flags, _, desc = line.strip().partition("  ")
            current = flags.split(",")[0].split()[0]
            blocks[current] = desc.strip()
        elif current is not None and line.startswith(" " * 8):
            blocks[current] = (blocks[current] + " " + line.strip()).strip()
    return blocks


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_option_has_a_help_line_and_a_true_default_shown_once(capsys, command):
    blocks = _option_blocks(_help(capsys, *([command] if command else [])))
    assert len(blocks) >= 3
    for flag, desc in blocks.items():
        assert desc, f"{command} {flag} has no help line"
        assert desc.count("(default") <= 1, f"{command} {flag}: {desc}"
        assert "None" not in desc, f"{command} {flag} shows None: {desc}"
    if command == "score":
        d = ScoreConfig()
        assert blocks["--inputs"].endswith(f"(default: {d.num_correctness_inputs})")
        assert blocks["--budget"].endswith(f"(default: {d.timing_budget_s:g})")
        assert blocks["--reverify-above"].endswith(f"(default: {d.reverify_above:g})")
        assert blocks["--device"].endswith("(default: cpu)")
    if command == "serve":  # what resolve_args applies when the flag and the config file are silent
        for flag, key in (("--port", "port"), ("--queue-limit", "queue_limit"), ("--drain-timeout", "drain_timeout"),
                          ("--max-source-bytes", "max_source_bytes"), ("--log-level", "log_level")):
            assert blocks[flag].endswith(f"(default: {DEFAULTS[key]})"), blocks[flag]


# Every scoring flag of `evalfarm score` with a value other than its default.
SCORING_FLAGS = [
    ["--inputs", "7"], ["--budget", "2.5"], ["--tolerance", "kernelbench"], ["--guard-policy", "paper"],
    ["--size-profile", "small"], ["--no-other-sizes"], ["--require-other-sizes"], ["--reverify-above", "0"],
    ["--charge-exchange", "on"], ["--charge-exchange", "off"], ["--gpu-lease-timeout", "5"],
    ["--no-correctness-block"], ["--warm-call", "on"], ["--warm-call", "off"], ["--precision", "tolerance"],
    ["--timing-protocol", "lone"],
]


def test_every_scoring_flag_means_the_same_locally_and_on_a_daemon(tmp_path):
    """Each flag through the local path (ScoreConfig from the command line) and the remote one (the
    request's ScoreOptions, read back as the daemon reads them): the same ScoreConfig, and not the
    default one."""
    import argparse

    from evalfarm import score_options
    from evalfarm.client.cli import _build_request
    from evalfarm.client.wire import config_from_pb

    probe = argparse.ArgumentParser()
    score_options.add_arguments(probe)
    flags = {o for a in probe._actions for o in a.option_strings if o.startswith("--")} - {"--help", "--device"}
    walked = {f[0] for f in SCORING_FLAGS} | {"--" + f[0][5:] for f in SCORING_FLAGS if f[0].startswith("--no-")}
    assert flags <= walked, f"walk these flags too: {sorted(flags - walked)}"
    (tmp_path / "c.py").write_text("class ModelNew: pass\n")
    base = ["score", "--task", TASK, "--candidate", str(tmp_path / "c.py")]
    default = score_options.local_config(build_parser().parse_args(base))
    for extra in SCORING_FLAGS:
        args = build_parser().parse_args([*base, *extra])
        local = score_options.local_config(args)
        remote = config_from_pb(_build_request(args).options, "cpu")
        assert local == remote, extra
        assert local != default, f"{extra} changes nothing"
        assert score_options.remote_identity(args) == {**local.to_dict(), "device": "farm"}, extra
    args = build_parser().parse_args([*base, "--precision", "tolerance", "--timing-protocol", "lone"])
    assert score_options.local_config(args).precision == "tolerance"
    assert config_from_pb(_build_request(args).options, "cpu").timing_protocol == "lone"


def test_links_in_help_texts_point_to_sections_that_exist(capsys):
    texts = [_help(capsys)] + [_help(capsys, c) for c in COMMANDS]
    links = {m.groups() for t in texts for m in re.finditer(r'((?:docs/[\w.-]+|README)\.md)(?:,\s+"([^"]+)")?',
                                                            " ".join(t.split()))}
    assert len(links) >= 4
    for path, section in links:
        f = REPO / path
        assert f.is_file(), path
        if section:
            headings = [h.lstrip("#").strip() for h in f.read_text().splitlines() if h.startswith("#")]
            assert any(h.startswith(section) for h in headings), (path, section)


def test_verbose_is_accepted_before_and_after_the_subcommand():
    parse = build_parser().parse_args
    assert parse(["score", "-v", "--task", "t", "--candidate", "c"]).verbose is True
    assert parse(["-v", "tasks"]).verbose is True
    assert parse(["status", "--server", "h:1", "--verbose"]).verbose is True
    assert parse(["tasks"]).verbose is False


def test_tasks_lists_each_tasks_variants_by_name(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("L1/2 "))
    assert "fast_any_row_scale" in line and "wrong_any_skips_last_row" in line
    example = re.search(r"--candidate (\S+\.py)", out)
    assert example is not None and (REPO / example.group(1)).is_file()


# --- batch inputs ------------------------------------------------------------------------------
def test_every_problem_of_a_batch_input_is_listed_before_anything_is_scored(tmp_path, capsys):
    (tmp_path / "good.py").write_text((DATA / "cand_same.py").read_text())
    (tmp_path / "latin1.py").write_bytes(b"# \xe9\nclass ModelNew: pass\n")
    lines = [
        {"task": TASK, "candidate": "good.py", "sample_id": "a"},
        {"task": TASK, "candidate": "missing.py", "sample_id": "b"},
        {"task": "L9/999", "candidate": "good.py", "sample_id": "c"},
        {"task": TASK, "candidate": "good.py", "sample_id": "a"},
        {"task": TASK, "sample_id": "d"},
        {"task": TASK, "candidate": "latin1.py", "sample_id": "e"},
    ]
    text = "\n".join(json.dumps(x) for x in lines[:3]) + "\n{not json\n" + "\n".join(json.dumps(x) for x in lines[3:])
    (tmp_path / "in.jsonl").write_text(text + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--candidates", str(tmp_path / "in.jsonl"), "--out", str(out), *QUICK]) == 2
    err = capsys.readouterr().err
    assert "6 problem(s)" in err and "nothing was scored" in err, err
    for expected in ("line 2: candidate file not found", "line 4: not JSON", "task 'L9/999' (line 3)",
                     "'a' appears 2 times (line 1, line 5)", "line 6: expected an object", "line 7: candidate file "
                     "is not valid UTF-8"):
        assert expected in err, (expected, err)
    assert not out.exists()


def test_a_directory_of_candidates_is_scored_against_one_task(tmp_path):
    d = tmp_path / "cands"
    d.mkdir()
    for name in ("c10.py", "c2.py", "c1.py"):
        (d / name).write_text(f"# {name}\nclass ModelNew: pass\n")
    (d / "notes.txt").write_text("not a candidate")
    (d / "sub").mkdir()
    (d / "sub" / "deeper.py").write_text("class ModelNew: pass\n")
    items = batch.read_candidates(d, task=TASK)
    assert [(i.sample_id, i.task) for i in items] == [("c1", TASK), ("c2", TASK), ("c10", TASK)]
    with pytest.raises(batch.BatchInputError, match=r"add --task T"):
        batch.read_candidates(d)


def test_a_run_directory_with_task_is_refused_with_the_reason(tmp_path):
    (tmp_path / "level1" / "problem_2").mkdir(parents=True)
    (tmp_path / "level1" / "problem_2" / "sample_0.py").write_text("class ModelNew: pass\n")
    with pytest.raises(batch.BatchInputError, match="leave out --task"):
        batch.read_candidates(tmp_path, task=TASK)


# --- resuming only what is the same -------------------------------------------------------------
class _Scorer:
    """Scores by rule (OK 1.5x, or the verdict given per sample), counting what it was asked."""

    def __init__(self, verdicts: dict[str, Verdict] | None = None) -> None:
        self.asked: list[str] = []
        self.verdicts = verdicts or {}

    def __call__(self, items: list[batch.BatchItem]):
        for item in items:
            self.asked.append(item.sample_id)
            verdict = self.verdicts.get(item.sample_id, Verdict.OK)
            result = ScoreResult(verdict, 1.5 if verdict is Verdict.OK else None, "" if verdict is Verdict.OK else "x")
            yield batch.result_row(item, result)


def _items(sources: dict[str, str]) -> list[batch.BatchItem]:
    return [batch.BatchItem(sid, "T", src) for sid, src in sources.items()]


def test_a_batch_reuses_a_row_only_for_the_same_candidate_task_and_options(tmp_path):
    out = tmp_path / "r.jsonl"
    items = _items({"a": "A", "b": "B", "c": "C"})
    task_sha = {"T": "t1"}
    options = {"timing_budget_s": 10.0, "device": "cpu", "baseline": None}
    ident = lambda it: Identity(task_sha[it.task], it.sha256, options)  # noqa: E731
    lines: list[str] = []
    first = _Scorer({"c": Verdict.INFRA_ERROR})
    rows = batch.run_batch(items, out, first, ident, progress=False, say=lines.append)
    assert first.asked == ["a", "b", "c"] and [r["scoring"] for r in rows] == [options] * 3
    assert not lines  # nothing to resume from

    again = _Scorer()
    batch.run_batch(items, out, again, ident, progress=False, say=lines.append)
    assert again.asked == ["c"]  # the INFRA_ERROR row only: the farm's fault is scored again
    assert lines[-1] == f"resuming from {out}: 2 of 3 samples reused; scored again: 1 INFRA_ERROR (the farm's fault: scored again)"

    changed = _items({"a": "A", "b": "B2", "c": "C"})  # b's source changed
    third = _Scorer()
    batch.run_batch(changed, out, third, ident, progress=False, say=lines.append)
    assert third.asked == ["b"] and "1 the candidate's source changed" in lines[-1]

    options = {**options, "timing_budget_s": 5.0}
    task_sha["T"] = "t2"  # and the task was fixed: the task is named first
    fourth = _Scorer()
    rows = batch.run_batch(changed, out, fourth, ident, progress=False, say=lines.append)
    assert fourth.asked == ["a", "b", "c"] and "3 the task's content changed" in lines[-1]
    options = {**options, "timing_budget_s": 7.0}
    fifth = _Scorer()
    rows = batch.run_batch(changed, out, fifth, ident, progress=False, say=lines.append)
    assert "3 scoring options changed (timing_budget_s)" in lines[-1]

    # One row per sample in the results file; every replaced row kept beside it.
    kept = batch.read_results(out)
    assert sorted(r["sample_id"] for r in kept) == ["a", "b", "c"] and kept == rows
    superseded = [json.loads(x) for x in batch_resume.superseded_path(out).read_text().splitlines()]
    assert len(superseded) == 1 + 1 + 3 + 3  # c's INFRA_ERROR, b's old source, then all three twice


def test_rows_without_identity_and_rows_of_other_samples(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({"sample_id": "a", "task": "T", "verdict": "OK", "speedup": 2.0}) + "\n"
                   + json.dumps({"sample_id": "zz", "task": "T", "verdict": "OK", "speedup": 2.0}) + "\n")
    lines: list[str] = []
    scorer = _Scorer()
    batch.run_batch(_items({"a": "A"}), out, scorer, lambda it: Identity("t", it.sha256, {}), progress=False,
                    say=lines.append)
    assert scorer.asked == ["a"]
    assert "1 recorded without its task and options (an older evalfarm)" in lines[0]
    assert "1 row(s) of samples not in this input left as they are" in lines[0]
    assert {r["sample_id"] for r in batch.read_results(out)} == {"a", "zz"}


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "evalfarm", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # two real CPU scores
def test_the_cli_resumes_what_is_the_same_and_rescores_a_changed_option(tmp_path):
    d = tmp_path / "cands"
    d.mkdir()
    shutil.copy(DATA / "cand_same.py", d / "same.py")
    out = tmp_path / "r.jsonl"
    common = ["--task", TASK, "--candidates", str(d), "--out", str(out), "--cache-dir", str(tmp_path / "cache"),
              "--inputs", "20"]
    first = _run("score", *common, "--budget", "0.5")
    assert first.returncode == 0, first.stderr
    before = out.read_bytes()
    assert json.loads(before)["verdict"] == "OK"
    again = _run("score", *common, "--budget", "0.5")
    assert again.returncode == 0 and f"resuming from {out}: 1 of 1 samples reused" in again.stderr, again.stderr
    assert out.read_bytes() == before  # nothing scored, nothing rewritten
    changed = _run("score", *common, "--budget", "0.6")
    assert "0 of 1 samples reused; scored again: 1 scoring options changed (timing_budget_s)" in changed.stderr
    rows = batch.read_results(out)
    assert len(rows) == 1 and rows[0]["scoring"]["timing_budget_s"] == 0.6
    assert len(batch_resume.superseded_path(out).read_text().splitlines()) == 1


# --- what a single score prints ------------------------------------------------------------------
def test_each_phase_is_printed_with_its_bound_and_the_banner_names_the_extra_checks(capsys, tmp_path):
    """A real local score of an OK candidate: the banner, then static, load, correctness and timing lines."""
    code = main(["score", "--task", TASK, "--candidate", str(DATA / "cand_same.py"), *QUICK,
                 "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    err = capsys.readouterr().err
    assert "--reverify-above 0 skips it" in err and "other sizes: none to check" in err
    phases = [m.group(1) for m in re.finditer(r"^\[ *[\d.]+ s\] (\w[\w -]*?):", err, re.M)]
    assert phases[:3] == ["load", "correctness", "timing"], err
    assert "(at most 120 s)" in err and "40 inputs checked" in err and "(at most 1 s from the first round)" in err
    assert re.search(r"^\[ *[\d.]+ s\] static analysis .*\(at most \d+ s\)$", err, re.M), err


def test_the_other_phases_and_unstable_say_their_bound_and_what_to_do():
    printer = PhasePrinter(ScoreConfig(timing_budget_s=4.0, build_timeout_s=90.0))
    assert "at most 90 s" in printer.line("build", {})
    assert printer.line("reverify", {"speedup": 4.2}).startswith("re-verification: 4.2x is above 3x")
    assert "(100 correctness inputs, then timing" in printer.line("reverify", {"speedup": 4.2})  # of the default 1000
    assert "(100 correctness inputs, then timing)" in "\n".join(extra_checks(parse_task(
        (DATA / "task_scale.py").read_text(), "t"), ScoreConfig(), "default"))
    assert "'small'" in printer.line("other_sizes", {"profile": "small"})
    assert printer.line("timing", {"run": "reverify"}) is None  # a re-check's inner phases are not repeated
    assert "at most 600 s, not charged" in printer.line("gpu_wait", {"holders": "pid 7"})
    timing = TimingEvidence(rounds=40, ci_low=0.8, ci_high=1.4, stable=False, bucket_variance=0.02)
    text = describe(ScoreResult(Verdict.OK, 1.1, evidence=Evidence(timing=timing)))
    assert "UNSTABLE: the rounds did not settle" in text and "--budget" in text and "quiet host" in text


# --- Ctrl-C and SIGTERM -------------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str) -> bool:
    return _start_time(pid) == started and process_state(pid) not in (None, "Z")


def _workers_running(pid: int) -> bool:
    """Whether a judge's worker runs below ``pid`` (the evaluation is under way)."""
    for child in descendants(pid):
        try:
            if b"evalfarm.judge.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _interrupt(argv: list[str], ready, sig: int) -> tuple[subprocess.CompletedProcess[str], dict[int, str]]:
    """Start the CLI, note every process below it while it runs, send ``sig`` once ``ready(pid)``;
    returns the finished command and the processes seen (pid -> start time)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            for pid in descendants(proc.pid):
                started = _start_time(pid)
                if started is not None:
                    seen.setdefault(pid, started)
            if ready(proc.pid):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the command ended before it could be interrupted"
        for pid in descendants(proc.pid):  # the last look before the signal
            if _start_time(pid) is not None:
                seen.setdefault(pid, _start_time(pid))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    end = time.monotonic() + 5  # a SIGKILLed process may take a moment to be gone
    while time.monotonic() < end and any(_alive(p, s) for p, s in seen.items()):
        time.sleep(0.1)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seen


def test_ctrl_c_during_a_batch_says_how_many_results_are_kept_and_leaves_no_process(tmp_path):
    d = tmp_path / "cands"
    d.mkdir()
    for i in range(4):
        shutil.copy(DATA / "cand_same.py", d / f"c{i}.py")
    out = tmp_path / "run.jsonl"
    argv = ["score", "--task", TASK, "--candidates", str(d), "--out", str(out), *QUICK,
            "--cache-dir", str(tmp_path / "cache")]
    done, seen = _interrupt(argv, lambda _pid: out.exists() and out.read_text().count("\n") >= 1, signal.SIGINT)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    kept = len(batch.read_results(out))
    assert 1 <= kept < 4
    assert done.stderr.strip().splitlines()[-1] == \
        f"interrupted: {kept} of 4 results in {out}; run the same command to resume"
    assert len(seen) >= 2, "the judge and its workers were to be seen running"
    assert [p for p, s in seen.items() if _alive(p, s)] == []


def test_sigterm_during_a_single_score_prints_one_line_and_leaves_no_process(tmp_path):
    argv = ["score", "--task", TASK, "--candidate", str(DATA / "cand_same.py"), *QUICK,
            "--cache-dir", str(tmp_path / "cache")]
    done, seen = _interrupt(argv, _workers_running, signal.SIGTERM)
    assert len(seen) >= 2, "the judge and its workers were to be seen running"
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"interrupted: no result for {DATA / 'cand_same.py'} (its evaluation was stopped); "
        "run the same command to score it")
    assert done.stdout == ""  # no verdict is printed for a stopped evaluation
    assert [p for p, s in seen.items() if _alive(p, s)] == []
