"""`evalfarm score --server ...` and `evalfarm status --server ...` (called from evalfarm.cli).

Exit codes: 0 whenever a verdict was obtained (any verdict); 2 when the tool itself cannot
run (bad arguments, missing file, daemon unreachable or refusing the request).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfarm.client.channel import CHANNEL_OPTIONS, TlsConfig, auth_metadata, read_token_file
from evalfarm.client.wire import is_draining, options_to_pb, result_from_pb
from evalfarm.config import ConfigError
from evalfarm.result import describe
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict

EXIT_TOOL = 2
DEFAULT_REMOTE_TIMEOUT_S = 1800.0
STATUS_TIMEOUT_S = 10.0  # how long `evalfarm status` waits for each daemon by default
BUSY_RETRY_S = 120.0  # how long to keep retrying a daemon that answers RESOURCE_EXHAUSTED


class ToolError(Exception):
    """The command cannot run; the message goes to stderr and the exit code is 2."""


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", required=True, action="append",
                        help="daemon HOST:PORT, dns:///NAME:PORT (every address of NAME) or file:///PATH; "
                             "repeat or separate with commas for a fleet table")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.add_argument("--health-only", action="store_true",
                        help="only ask the gRPC health service (no token needed): exit 0 when every "
                             "daemon is ready to score, 1 when one is not (container health checks)")
    add_connection_arguments(parser, token=True, timeout_s=STATUS_TIMEOUT_S)


def add_connection_arguments(parser: argparse.ArgumentParser, token: bool = False,
                             timeout_s: float | str = DEFAULT_REMOTE_TIMEOUT_S) -> None:
    """TLS options (and --token-file) for talking to a daemon; ``timeout_s``: what --timeout
    stands for when it is left out (said in its help)."""
    if token:
        parser.add_argument("--token-file", default=None, metavar="FILE",
                            help="file holding the bearer token")
    parser.add_argument("--tls-ca", default=None, metavar="FILE",
                        help="CA certificate (PEM) to verify the daemon (enables TLS)")
    parser.add_argument("--tls-cert", default=None, metavar="FILE", help="client certificate for mTLS")
    parser.add_argument("--tls-key", default=None, metavar="FILE", help="client key for mTLS")
    parser.add_argument("--tls-server-name", default=None, metavar="NAME",
                        help="expected name in the daemon certificate")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"seconds to wait for the daemon's answer (default: {timeout_s:g})" if isinstance(timeout_s, float)
                        else f"seconds to wait for the daemon's answer (default: {timeout_s})")


def _tls_from(args: argparse.Namespace) -> TlsConfig | None:
    ca, cert, key = (getattr(args, n, None) for n in ("tls_ca", "tls_cert", "tls_key"))
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ToolError("--tls-cert and --tls-key go together")
    for flag, value in (("--tls-ca", ca), ("--tls-cert", cert), ("--tls-key", key)):
        if value and not Path(value).is_file():
            raise ToolError(f"{flag}: file not found: {value}")
    return TlsConfig(root_ca=ca, client_cert=cert, client_key=key,
                     server_name=getattr(args, "tls_server_name", None))


def _token_from(args: argparse.Namespace) -> str | None:
    path = getattr(args, "token_file", None)
    if not path:
        return None
    try:
        return read_token_file(path)
    except OSError as err:
        raise ToolError(f"cannot read token file {path}: {err.strerror}") from None


def _channel(args: argparse.Namespace, target: str | None = None) -> grpc.Channel:
    target = target if target is not None else args.server
    if not target or ":" not in target:
        raise ToolError(f"--server must be HOST:PORT, got {target!r}")
    tls = _tls_from(args)
    options = list(CHANNEL_OPTIONS)
    if tls is not None:
        if tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        return grpc.secure_channel(target, tls.credentials(), options=options)
    return grpc.insecure_channel(target, options=options)


def _rpc_error(server: str, err: grpc.RpcError) -> ToolError:
    code = err.code()
    if code is grpc.StatusCode.UNAVAILABLE and is_draining(err.details() or ""):
        return ToolError(f"the evalfarm daemon at {server} is draining (shutting down) and takes no new work: "
                         "try another daemon, or this one once it is back")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ToolError(f"cannot reach the evalfarm daemon at {server}: {code.name}: {err.details()}")
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return ToolError(f"the daemon at {server} refused the token: {err.details()} (use --token-file)")
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return ToolError(f"the daemon rejected the request: {err.details()}")
    return ToolError(f"the daemon at {server} answered {code.name}: {err.details()}")


def _build_request(args: argparse.Namespace) -> pb.ScoreRequest:
    cand_path = Path(args.candidate)
    if not cand_path.is_file():
        raise ToolError(f"candidate file not found: {cand_path}")
    try:
        source = cand_path.read_bytes()
        source.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"candidate file is not valid UTF-8: {cand_path}") from None
    spec = str(args.task)
    task_path = Path(spec)
    if task_path.suffix == ".py" or task_path.exists():
        if not task_path.is_file():
            raise ToolError(f"task file not found: {task_path}")
        task = pb.TaskRef(source=pb.TaskSource(source=task_path.read_bytes(), name=task_path.stem))
    else:
        task = pb.TaskRef(name=spec)
    from evalfarm.score_options import option_changes

    try:
        opts = options_to_pb(option_changes(args))
    except ConfigError as err:
        raise ToolError(str(err)) from None
    return pb.ScoreRequest(task=task, options=opts,
                           candidate=pb.Candidate(source=source, sample_id=cand_path.stem))


def run_remote_score(args: argparse.Namespace) -> Verdict | None:
    """Score one candidate on a daemon; print like the local `evalfarm score`. The verdict, or
    None when it could not be scored (the reason printed on stderr)."""
    try:
        request = _build_request(args)
        metadata = auth_metadata(_token_from(args))
        timeout = getattr(args, "timeout", None) or DEFAULT_REMOTE_TIMEOUT_S
        with _channel(args) as channel:
            stub = pb_grpc.EvalFarmStub(channel)
            if not args.json:
                print(f"scoring {args.candidate} against {args.task} on {args.server} ...", file=sys.stderr)
            reply = _score_with_busy_retry(stub, request, metadata, timeout, args.server)
    except ToolError as err:
        print(f"evalfarm: error: {err}", file=sys.stderr)
        return None
    result = result_from_pb(reply)
    if args.json:
        out = result.to_dict()
        out["host"] = reply.host
        if reply.gpu_name:
            out["gpu_name"] = reply.gpu_name
        if reply.evidence.cached:
            out["cached"] = True
        print(json.dumps(out))
    else:
        print(describe(result))
        cached = " (cached)" if reply.evidence.cached else ""
        gpu = f", {reply.gpu_name}" if reply.gpu_name else ""
        print(f"host:    {reply.host}{gpu}{cached}")
    return result.verdict


def _score_with_busy_retry(
    stub: pb_grpc.EvalFarmStub, request: pb.ScoreRequest, metadata: Any, timeout: float, server: str
) -> pb.ScoredSample:
    end = time.monotonic() + timeout
    busy_until = time.monotonic() + min(BUSY_RETRY_S, timeout)
    delay = 0.2
    while True:
        try:
            return stub.Score(request, timeout=max(0.1, end - time.monotonic()), metadata=metadata)
        except grpc.RpcError as err:
            if err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() + delay < busy_until:
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            raise _rpc_error(server, err) from None


def _status_of(target: str, args: argparse.Namespace, metadata: Any, timeout: float) -> dict[str, Any]:
    """Capacity and health of one daemon (raises ToolError when it cannot be reached)."""
    with _channel(args, target) as channel:
        try:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
            cap = pb_grpc.EvalFarmStub(channel).Capacity(pb.CapacityRequest(), timeout=timeout, metadata=metadata)
        except grpc.RpcError as err:
            raise _rpc_error(target, err) from None
    return {
        "server": target,
        "health": health_pb2.HealthCheckResponse.ServingStatus.Name(health.status),
        "host": cap.host,
        "version": cap.version,
        "device_mode": cap.device_mode,
        "gpu_model": cap.gpu_model,
        "gpu_names": list(cap.gpu_names),
        "slots": cap.slots,
        "free_slots": cap.free_slots,
        "running": cap.running,
        "out_of_service": cap.out_of_service,
        "queue_depth": cap.queue_depth,
        "queue_limit": cap.queue_limit,
        "draining": cap.draining,
        "sandbox": cap.sandbox,
        "slot_status": [
            {"index": sl.index, "device": sl.device, "gpu_name": sl.gpu_name, "gpu_uuid": sl.gpu_uuid,
             "busy": sl.busy, "in_service": sl.in_service, "reason": sl.reason,
             "consecutive_faults": sl.consecutive_faults}
            for sl in cap.slot_status
        ],
    }


def _targets(specs: list[str]) -> tuple[list[str], bool]:
    """(daemon addresses, whether the specs name a fleet) from --server values."""
    import asyncio

    from evalfarm.client.discovery import Discovery, EndpointSpecError

    flat = [p.strip() for spec in specs for p in spec.split(",") if p.strip()]
    try:
        discovery = Discovery(flat)
    except EndpointSpecError as err:
        raise ToolError(str(err)) from None
    targets = asyncio.run(discovery.resolve())
    if not targets:
        raise ToolError(f"no daemon found at {', '.join(flat)}")
    return targets, discovery.dynamic or len(flat) > 1


def _health_only(targets: list[str], args: argparse.Namespace, timeout: float) -> int:
    """0 when every daemon's scoring service is SERVING (ready), else 1; one line per daemon."""
    service = pb.DESCRIPTOR.services_by_name["EvalFarm"].full_name
    ready = True
    for target in targets:
        with _channel(args, target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=timeout)
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as err:
                status = f"UNREACHABLE ({err.code().name})"
        ready &= status == "SERVING"
        print(f"{target} {status}")
    return 0 if ready else 1


def _print_one(info: dict[str, Any]) -> None:
    gpus = ", ".join(info["gpu_names"]) or "-"
    print(f"{info['server']}  host {info['host']}  evalfarm {info['version']}  health {info['health']}"
          f"{'  DRAINING' if info['draining'] else ''}")
    print(f"  mode {info['device_mode']}  gpus: {gpus}")
    if info["sandbox"]:
        print(f"  sandbox {info['sandbox']}")
    print(f"  slots {info['free_slots']}/{info['slots']} free, {info['running']} running, "
          f"{info['out_of_service']} out of service, queue {info['queue_depth']}/{info['queue_limit']}")
    for sl in info["slot_status"]:
        if not sl["in_service"]:
            print(f"  slot {sl['index']} ({sl['gpu_uuid'] or sl['device']}) OUT OF SERVICE: {sl['reason']}")


FLEET_COLUMNS = ("server", "host", "health", "model", "slots", "free", "busy", "out", "queue", "version")


def _fleet_rows(infos: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for i in infos:
        if "error" in i:
            rows.append((i["server"], "-", "UNREACHABLE", "-", "-", "-", "-", "-", "-", "-"))
            continue
        health = "DRAINING" if i["draining"] else i["health"]
        rows.append((i["server"], i["host"], health, i["gpu_model"] or "mixed", str(i["slots"]),
                     str(i["free_slots"]), str(i["running"]), str(i["out_of_service"]),
                     f"{i['queue_depth']}/{i['queue_limit']}", i["version"]))
    return rows


def _totals(infos: list[dict[str, Any]]) -> dict[str, Any]:
    up = [i for i in infos if "error" not in i]
    models: dict[str, int] = {}
    for i in up:
        models[i["gpu_model"] or "mixed"] = models.get(i["gpu_model"] or "mixed", 0) + i["slots"]
    return {"daemons": len(infos), "reachable": len(up),
            "serving": sum(1 for i in up if i["health"] == "SERVING" and not i["draining"]),
            "slots": sum(i["slots"] for i in up), "free_slots": sum(i["free_slots"] for i in up),
            "running": sum(i["running"] for i in up), "out_of_service": sum(i["out_of_service"] for i in up),
            "queue_depth": sum(i["queue_depth"] for i in up), "slots_by_model": models}


def run_status(args: argparse.Namespace) -> int:
    """Capacity and health of one daemon, or a table of a fleet (many --server, or a DNS name)."""
    import concurrent.futures

    specs = [args.server] if isinstance(args.server, str) else list(args.server)
    try:
        metadata = auth_metadata(_token_from(args))
        timeout = getattr(args, "timeout", None) or STATUS_TIMEOUT_S
        targets, fleet = _targets(specs)
        if getattr(args, "health_only", False):
            return _health_only(targets, args, timeout)
        if not fleet:
            info = _status_of(targets[0], args, metadata, timeout)
    except ToolError as err:
        print(f"evalfarm: error: {err}", file=sys.stderr)
        return EXIT_TOOL
    if not fleet:
        if args.json:
            print(json.dumps(info))
        else:
            _print_one(info)
        return 0

    def one(target: str) -> dict[str, Any]:
        try:
            return _status_of(target, args, metadata, timeout)
        except ToolError as err:
            return {"server": target, "error": str(err)}

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        infos = list(pool.map(one, targets))
    totals = _totals(infos)
    if args.json:
        print(json.dumps({"daemons": infos, "totals": totals}))
        return 0
    rows = [FLEET_COLUMNS, *_fleet_rows(infos)]
    widths = [max(len(r[c]) for r in rows) for c in range(len(FLEET_COLUMNS))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    models = ", ".join(f"{m}: {n}" for m, n in sorted(totals["slots_by_model"].items())) or "-"
    print(f"{totals['reachable']}/{totals['daemons']} daemons reachable, {totals['serving']} serving; "
          f"slots {totals['free_slots']}/{totals['slots']} free, {totals['running']} busy, "
          f"{totals['out_of_service']} out of service; queued {totals['queue_depth']}; by model: {models}")
    for i in infos:
        if i.get("sandbox", "").startswith("WEAK"):
            print(f"  {i['server']} sandbox {i['sandbox']}")
        for sl in i.get("slot_status", []):
            if not sl["in_service"]:
                print(f"  {i['server']} slot {sl['index']} ({sl['gpu_uuid'] or sl['device']}) OUT OF SERVICE: "
                      f"{sl['reason']}")
    return 0 if totals["reachable"] else EXIT_TOOL
