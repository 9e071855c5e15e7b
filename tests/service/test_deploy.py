"""deploy/: Kubernetes manifests validated against the Kubernetes schemas, the Dockerfile and the
systemd unit linted against the repository and the CLI, alert rules against real metric names;
and each deployment gives candidates the strong sandbox (issue 42): bubblewrap in the image, a
daemon that may use it, a cache it can write, one apply on a new cluster, no usable token shipped."""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
import shutil
import subprocess
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


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())


def k8s_docs() -> list[dict[str, Any]]:
    """The objects of the kustomization's resources, in its order."""
    docs = []
    for name in kustomization()["resources"]:
        docs.extend(d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d)
    return docs


def by_kind(kind: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version: str) -> None:
    docs = k8s_docs()
    assert {d["kind"] for d in docs} == {"Namespace", "ConfigMap", "Service", "DaemonSet"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises with the offending field


def test_daemonset_wiring() -> None:
    ds, svc = by_kind("DaemonSet"), by_kind("Service")
    pod = ds["spec"]["template"]
    assert svc["spec"]["clusterIP"] == "None"  # headless: one DNS record per daemon
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"]
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
    assert secrets == {g["name"] for g in kustomization()["secretGenerator"]}  # every Secret it mounts is made
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
    # The daemon is root in the container (candidates switch to uid 65534 inside bubblewrap).
    users = [i["value"] for i in instructions if i["instruction"] == "USER"]
    assert not users or users[-1].split(":")[0] in ("root", "0")
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
    assert argv[0].endswith("/evalfarm")
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


# -- the strong sandbox in every deployment (issue 42) ------------------------------------------

def _unit() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "evalfarm.service")
    return unit["Service"]


def _unit_values(key: str) -> list[str]:
    """Every value of a key the unit repeats (Environment=, ExecStartPre=)."""
    text = (DEPLOY / "systemd" / "evalfarm.service").read_text()
    return [m.group(1).strip() for m in re.finditer(rf"^{key}=(.*)$", text, re.MULTILINE)]


def test_the_image_has_bubblewrap_and_a_root_daemon_whose_candidates_switch_uid() -> None:
    parser = dockerfile_parse.DockerfileParser(path=str(DEPLOY / "Dockerfile"))
    runs = [i["value"] for i in parser.structure if i["instruction"] == "RUN"]
    install = next(r for r in runs if "apt-get install" in r)
    assert "bubblewrap" in install.split()
    envs = " ".join(i["value"] for i in parser.structure if i["instruction"] == "ENV")
    assert "EVALFARM_SANDBOX" not in envs  # neither builtin nor uid off: the strong sandbox is the default
    # The documented `docker run` gives bubblewrap what it needs as root in a container.
    header = parser.content.split("FROM", 1)[0]
    for flag in ("--cap-add SYS_ADMIN", "--cap-add NET_ADMIN", "--security-opt seccomp=unconfined",
                 "--security-opt apparmor=unconfined", "--gpus all"):
        assert flag in header, flag


def test_the_daemonset_lets_a_root_daemon_use_bubblewrap() -> None:
    pod = by_kind("DaemonSet")["spec"]["template"]
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert spec["securityContext"]["runAsUser"] == 0 and spec["securityContext"]["runAsNonRoot"] is False
    assert spec["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    assert pod["metadata"]["annotations"][f"container.apparmor.security.beta.kubernetes.io/{c['name']}"] == "unconfined"
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    needed = {"SYS_ADMIN", "NET_ADMIN", "SETPCAP", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"}
    assert needed <= set(sc["capabilities"]["add"])
    # The API refuses allowPrivilegeEscalation: false together with SYS_ADMIN.
    assert sc["allowPrivilegeEscalation"] is True
    names = {e["name"] for e in c.get("env", [])}
    assert not names & {"EVALFARM_SANDBOX", "EVALFARM_SANDBOX_UID", "EVALFARM_WORKER_NETNS"}
    # A cluster's default Pod Security level ("baseline") would refuse those capabilities and profiles.
    assert by_kind("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_daemonset_cache_is_writable_by_the_daemon() -> None:
    spec = by_kind("DaemonSet")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    config = tomllib.loads(by_kind("ConfigMap")["data"]["farm.toml"])
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == config["cache-dir"])
    assert not mount.get("readOnly")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    uid = spec["securityContext"]["runAsUser"]
    if "hostPath" in volume:  # the kubelet makes a missing hostPath root-owned 0755: only uid 0 writes it
        inits = [i for i in spec.get("initContainers", []) if any(m["name"] == volume["name"]
                                                                     for m in i.get("volumeMounts", []))]
        assert uid == 0 or inits, "a non-root daemon cannot write a hostPath the kubelet created"
    else:
        assert "emptyDir" in volume or "persistentVolumeClaim" in volume


def test_one_apply_makes_the_namespace_first_and_everything_in_it() -> None:
    k = kustomization()
    files = sorted(p.name for p in (DEPLOY / "k8s").glob("*.yaml") if p.name != "kustomization.yaml")
    assert k["resources"] == files  # numbered: `kubectl apply -f` applies them in this order too
    docs = k8s_docs()
    assert docs[0]["kind"] == "Namespace"
    namespace = docs[0]["metadata"]["name"]
    assert k["namespace"] == namespace
    assert all(d["metadata"]["namespace"] == namespace for d in docs[1:])
    assert not any(d["kind"] == "Secret" for d in docs)  # the Secrets come from the operator's files


def test_no_token_ships_with_the_deployment() -> None:
    from evalfarm.server.config import PLACEHOLDER_TOKENS

    shipped = [p for p in DEPLOY.rglob("*") if p.is_file()]
    for path in shipped:
        text = path.read_text(errors="replace")
        assert not any(t in text for t in PLACEHOLDER_TOKENS), path
    ignored = (DEPLOY / "k8s" / ".gitignore").read_text().split()
    generated = [f for g in kustomization()["secretGenerator"] for f in g["files"]]
    assert generated and all(f in ignored for f in generated)  # the operator's files are never committed


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) is not installed")
def test_kustomize_renders_one_apply_with_the_operators_secrets(tmp_path: Path) -> None:
    work = tmp_path / "k8s"
    shutil.copytree(DEPLOY / "k8s", work)
    missing = subprocess.run(["kubectl", "kustomize", str(work)], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "token" in missing.stderr  # no token file: nothing is applied
    (work / "token").write_text("k" * 64 + "\n")
    (work / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (work / "tls.key").write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    out = subprocess.run(["kubectl", "kustomize", str(work)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs[0]["kind"] == "Namespace"
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    assert set(secrets) == {"evalfarm-token", "evalfarm-tls"}
    assert all(d["metadata"].get("namespace") == "evalfarm" for d in docs if d["kind"] != "Namespace")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_systemd_unit_runs_a_root_daemon_that_shares_the_hosts_gpu_leases() -> None:
    from evalfarm.judge import gpu_lease

    svc = _unit()
    assert svc.get("User", "root") == "root" and svc.get("DynamicUser", "no") == "no"
    assert not any("EVALFARM_SANDBOX" in e or "EVALFARM_WORKER_NETNS" in e for e in _unit_values("Environment"))
    lease_dir = next((e.split("=", 2)[2] for e in _unit_values("Environment")
                      if e.startswith(f"{gpu_lease.LEASE_DIR_ENV}=")), gpu_lease.DEFAULT_LEASE_DIR)
    assert lease_dir == gpu_lease.DEFAULT_LEASE_DIR  # what `evalfarm score` on this host uses
    if svc.get("PrivateTmp", "no") == "yes" and lease_dir.startswith("/tmp/"):
        assert lease_dir in svc.get("BindPaths", "").split()  # the host's directory, not a private one
        assert any(v.startswith("+") and lease_dir in v for v in _unit_values("ExecStartPre"))
