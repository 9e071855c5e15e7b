"""deploy/: Kubernetes manifests validated against the Kubernetes schemas, the Dockerfile and the
systemd unit linted against the repository and the CLI, alert rules against real metric names."""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfarm.cli import build_parser
from evalfarm.client.cli import run_status
from evalfarm.server.cli import add_serve_arguments
from evalfarm.server.config_file import load_config_file

from .test_operations import free_port

kubernetes_validate = pytest.importorskip("kubernetes_validate")
dockerfile_parse = pytest.importorskip("dockerfile_parse")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S_VERSIONS = ("1.29.0", "1.33.0")


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


def by_kind(kind: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version: str) -> None:
    docs = k8s_docs()
    assert {d["kind"] for d in docs} == {"Namespace", "Secret", "ConfigMap", "Service", "DaemonSet"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises with the offending field


def test_daemonset_wiring() -> None:
    ds, svc = by_kind("DaemonSet"), by_kind("Service")
    pod = ds["spec"]["template"]
    assert svc["spec"]["clusterIP"] == "None"  # headless: one DNS record per daemon
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    config_text = by_kind("ConfigMap")["data"]["farm.toml"]
    config = tomllib.loads(config_text)
    health_port = config["health-port"]
    assert c["readinessProbe"]["grpc"] == {"port": health_port, "service": "evalfarm.v1.EvalFarm"}
    assert c["livenessProbe"]["grpc"]["port"] == health_port
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": config["port"], "health": health_port, "metrics": config["metrics-port"]}
    assert spec["terminationGracePeriodSeconds"] > config["drain-timeout"]
    # every file the config names is mounted from the volume that holds it
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    for key in ("auth-token-file", "tls-cert", "tls-key"):
        assert str(Path(config[key]).parent) in mounts, key
    args = c["args"]
    assert str(Path(args[args.index("--config") + 1]).parent) in mounts
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert by_kind("Secret")["metadata"]["name"] in secrets
    assert by_kind("ConfigMap")["metadata"]["name"] in {v["configMap"]["name"] for v in spec["volumes"]
                                                          if "configMap" in v}


def test_config_files_are_valid(tmp_path: Path) -> None:
    for text in (by_kind("ConfigMap")["data"]["farm.toml"], (DEPLOY / "systemd" / "farm.toml").read_text()):
        f = tmp_path / "farm.toml"
        f.write_text(text)
        values = load_config_file(f, serve_parser())
        assert values["gpus"] == "all" and values["log_format"] == "json"


def test_dockerfile_lint() -> None:
    parser = dockerfile_parse.DockerfileParser(path=str(DEPLOY / "Dockerfile"))
    instructions = parser.structure
    assert "devel" in parser.baseimage and parser.baseimage.startswith("nvidia/cuda:")
    copies = [i["value"].split() for i in instructions if i["instruction"] == "COPY"]
    assert copies
    for words in copies:
        for src in [w for w in words[:-1] if not w.startswith("--")]:
            assert (REPO / src).exists(), f"COPY source {src} is not in the build context (repo root)"
    users = [i["value"] for i in instructions if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    runs = " ".join(i["value"] for i in instructions if i["instruction"] == "RUN")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in re.findall(r'\.\[(\w[\w-]*)\]', runs):
        assert extra in extras, f"the Dockerfile installs unknown extra {extra!r}"
    assert "jax" not in runs.lower() and 'pip install ".[farm]"' in runs
    cli = build_parser()
    entry = yaml.safe_load(next(i["value"] for i in instructions if i["instruction"] == "ENTRYPOINT"))
    cmd = yaml.safe_load(next(i["value"] for i in instructions if i["instruction"] == "CMD"))
    argv = [*entry, *cmd]
    assert argv[0] == "evalfarm"
    args = cli.parse_args(argv[1:])
    assert args.command == "serve" and args.config == "/etc/evalfarm/farm.toml"
    assert any(i["value"].startswith("deploy/systemd/farm.toml") for i in instructions if i["instruction"] == "COPY")
    health = next(i["value"] for i in instructions if i["instruction"] == "HEALTHCHECK")
    check = yaml.safe_load(health.split("CMD", 1)[1].strip())
    assert check[0] == "evalfarm" and cli.parse_args(check[1:]).health_only


def test_systemd_unit() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "evalfarm.service")
    svc = unit["Service"]
    argv = shlex.split(svc["ExecStart"])
    assert argv[0].endswith("/evalfarm") and svc["User"] != "root"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve"
    config = tomllib.loads((DEPLOY / "systemd" / "farm.toml").read_text())
    assert Path(args.config).name == "farm.toml"
    assert svc["KillSignal"] == "SIGTERM" and int(svc["TimeoutStopSec"]) > config["drain-timeout"]
    assert config["cache-dir"] in svc["ReadWritePaths"]


def _metric_names(port: int) -> set[str]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
    return names


def test_alert_rules_use_real_metrics(daemon_factory) -> None:
    port = free_port()
    daemon_factory(metrics_port=port)
    names = _metric_names(port)
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    assert len(alerts) >= 6
    for rule in alerts:
        assert {"alert", "expr", "for", "labels", "annotations"} <= rule.keys(), rule.get("alert")
        assert rule["labels"]["severity"] in ("page", "ticket", "info") and rule["annotations"]["summary"]
        used = set(re.findall(r"\b(evalfarm_[a-z_]+)", rule["expr"]))
        assert used <= names, (rule["alert"], used - names)
        assert rule["expr"].count("(") == rule["expr"].count(")")


def test_health_port_answers_without_tls_or_token(daemon_factory, tmp_path: Path, capsys) -> None:
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    hp = free_port()
    d = daemon_factory(auth_token_file=token, health_port=hp)
    args = argparse.Namespace(server=[f"127.0.0.1:{hp}"], json=False, token_file=None, timeout=5,
                              health_only=True)
    assert run_status(args) == 0
    assert capsys.readouterr().out.strip() == f"127.0.0.1:{hp} SERVING"
    d.drain()
    assert run_status(args) == 1
