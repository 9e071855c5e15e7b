"""learner.runtime.compile_cache: which directory a run's JAX compilation cache uses, and that a second
process loads the first one's compiled program from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from learner.runtime.compile_cache import CACHE_ENV, cache_dir_for

REPO = Path(__file__).resolve().parents[2]

# One process: enable the cache as a run does, compile one program, report the cache's hits.
PROGRAM = """
import json, sys
import jax, jax.numpy as jnp
from learner.runtime import compile_cache
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
where = compile_cache.enable(sys.argv[1], sys.argv[2])
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() + jnp.sin(x).mean())
f(jnp.ones((32, 32))).block_until_ready()
print(json.dumps({"dir": None if where is None else str(where), "hits": len(hits)}))
"""


def _run(setting: str, workdir: Path, env_dir: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # this small program compiles fast
    env["JAX_PLATFORMS"] = "cpu"
    if env_dir is not None:
        env[CACHE_ENV] = env_dir
    out = subprocess.run([sys.executable, "-c", PROGRAM, setting, str(workdir)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_setting_env_and_workdir_precedence(tmp_path):
    assert cache_dir_for("", tmp_path, {}) == tmp_path / "jax-cache"
    assert cache_dir_for("", tmp_path, {CACHE_ENV: "/srv/jax"}) == Path("/srv/jax")
    assert cache_dir_for("/mine", tmp_path, {CACHE_ENV: "/srv/jax"}) == Path("/mine")
    assert cache_dir_for("off", tmp_path, {CACHE_ENV: "/srv/jax"}) is None
    assert cache_dir_for("~/c", tmp_path, {}) == Path.home() / "c"


def test_a_second_process_loads_the_compiled_program_from_the_run_cache(tmp_path):
    first = _run("", tmp_path)
    assert first == {"dir": str(tmp_path / "jax-cache"), "hits": 0}
    assert any((tmp_path / "jax-cache").iterdir())
    second = _run("", tmp_path)
    assert second["hits"] >= 1, second


def test_off_writes_no_cache_and_loads_nothing(tmp_path):
    assert _run("off", tmp_path) == {"dir": None, "hits": 0}
    assert _run("off", tmp_path) == {"dir": None, "hits": 0}
    assert not (tmp_path / "jax-cache").exists()


def test_a_cache_dir_that_is_a_file_is_a_config_error(tmp_path, monkeypatch):
    from configs.demo import get_config
    from learner.config_check import TrainConfigError, validate_config

    cfg = get_config()
    (tmp_path / "f").write_text("")
    cfg.jax_cache_dir = str(tmp_path / "f")
    with pytest.raises(TrainConfigError, match="jax_cache_dir.*is a file"):
        validate_config(cfg)
    cfg.jax_cache_dir = str(tmp_path / "new-dir")
    validate_config(cfg)
    # The default setting names the operator's directory: a file there is refused too.
    cfg.jax_cache_dir = ""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "f"))
    with pytest.raises(TrainConfigError, match=f"jax_cache_dir.*names {tmp_path / 'f'}, which is a file"):
        validate_config(cfg)
