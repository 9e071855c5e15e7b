"""`evalfarm serve` argument handling (no daemon started)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from evalfarm.server import cli as server_cli
from evalfarm.server.cli import add_serve_arguments, config_from_args, run_serve
from evalfarm.server.config import ServerConfigError
from evalfarm.server.gpus import parse_gpu_list


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_cpu_slots() -> None:
    cfg = config_from_args(parse("--device", "cpu", "--slots", "3", "--queue-limit", "5"))
    assert cfg.devices == ("cpu",) * 3 and cfg.device_mode == "cpu" and cfg.queue_limit == 5


def test_gpu_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_cli, "gpu_names", lambda: ["NVIDIA H100", "NVIDIA H100", "NVIDIA A100"])
    cfg = config_from_args(parse("--gpus", "all"))
    assert cfg.devices == ("cuda:0", "cuda:1", "cuda:2") and cfg.gpu_names[2] == "NVIDIA A100"
    cfg = config_from_args(parse("--gpus", "2,0"))
    assert cfg.devices == ("cuda:2", "cuda:0") and cfg.gpu_names == ("NVIDIA A100", "NVIDIA H100")
    with pytest.raises(ServerConfigError, match="no GPU 7"):
        config_from_args(parse("--gpus", "7"))


def test_gpu_list_parsing() -> None:
    with pytest.raises(ValueError, match="no NVIDIA GPU"):
        parse_gpu_list("all", [])
    with pytest.raises(ValueError, match="distinct"):
        parse_gpu_list("0,0", ["a"])
    with pytest.raises(ValueError, match="'all' or a list"):
        parse_gpu_list("x", ["a"])


def test_token_and_tls_checks(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(ServerConfigError, match="too short"):
        config_from_args(parse("--auth-token-file", str(short)))
    with pytest.raises(ServerConfigError, match="cannot read token"):
        config_from_args(parse("--auth-token-file", str(tmp_path / "missing")))
    with pytest.raises(ServerConfigError, match="go together"):
        cert = tmp_path / "c.pem"
        cert.write_text("x")
        config_from_args(parse("--tls-cert", str(cert)))


def test_run_serve_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_serve(parse("--host", "10.1.2.3", "--device", "cpu")) == 2
    assert "non-loopback" in capsys.readouterr().err


def _token(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    f = tmp_path / "token"
    f.write_text(text)
    f.chmod(mode)
    return f


def test_tokens_shorter_than_32_bytes_or_published_are_refused(tmp_path: Path) -> None:
    from evalfarm.server.config import PLACEHOLDER_TOKENS

    with pytest.raises(ServerConfigError, match=r"too short \(31 bytes, need at least 32\).*openssl rand -hex 32"):
        config_from_args(parse("--device", "cpu", "--auth-token-file", str(_token(tmp_path, "x" * 31))))
    assert config_from_args(parse("--device", "cpu", "--auth-token-file",
                                  str(_token(tmp_path, "x" * 32)))).auth_token_file is not None
    for placeholder in PLACEHOLDER_TOKENS:
        with pytest.raises(ServerConfigError, match="published placeholder"):
            config_from_args(parse("--device", "cpu", "--auth-token-file", str(_token(tmp_path, placeholder))))


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_token_file_others_may_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    f = _token(tmp_path, "k" * 64, mode)
    with pytest.raises(ServerConfigError) as err:
        config_from_args(parse("--device", "cpu", "--auth-token-file", str(f)))
    assert f"open to other users (mode {mode:04o}): chmod 600 {f}" in str(err.value)


def test_a_token_file_that_becomes_readable_by_others_keeps_the_last_good_tokens(tmp_path: Path) -> None:
    from evalfarm.server.reload import TokenFile

    f = _token(tmp_path, "a" * 40)
    tokens = TokenFile(f, check_interval_s=0.0)
    f.write_text("b" * 40)
    f.chmod(0o644)
    assert tokens.tokens() == ("a" * 40,)
    f.chmod(0o600)
    f.write_text("c" * 40 + "\n")
    assert tokens.tokens() == ("c" * 40,)


def test_a_tls_key_others_may_read_is_refused(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("x")
    key.write_text("x")
    key.chmod(0o644)
    with pytest.raises(ServerConfigError, match=r"TLS key .* is open to other users \(mode 0644\)"):
        config_from_args(parse("--device", "cpu", "--tls-cert", str(cert), "--tls-key", str(key)))


def test_serve_takes_the_gpus_it_finds_unless_told_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(server_cli, "gpu_names", lambda: ["NVIDIA H100", "NVIDIA H100"])
    cfg = config_from_args(parse())
    assert cfg.devices == ("cuda:0", "cuda:1")
    assert "2 GPU(s) found: one slot each (--device cpu for CPU slots instead)" in capsys.readouterr().err
    assert config_from_args(parse("--device", "cpu")).devices == ("cpu",)
    config = tmp_path / "farm.toml"
    config.write_text('gpus = "all"\n')  # the shipped file's GPUs; --device cpu on the command line wins
    assert config_from_args(parse("--config", str(config), "--device", "cpu")).devices == ("cpu",)
    monkeypatch.setattr(server_cli, "gpu_names", lambda: [])
    assert config_from_args(parse()).devices == ("cpu",)
    assert "no NVIDIA GPU found" in capsys.readouterr().err
