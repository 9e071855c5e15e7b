"""An operator's hostile-tenant drill: candidates that go for the daemon's secrets, sent to a daemon.

    python -m evalfarm.ops.hostile_drill --server HOST:PORT --token-file /etc/evalfarm/token \\
        --secret-file /etc/evalfarm/token --secret-file /etc/evalfarm/farm.toml [--secret-file ...]

Run it on the daemon's host, after deploying it (``deploy/smoke.sh`` does), as a user who can read
the secret files: it reads them to know what must not come back, and sends nothing of them. Each
attack is a candidate that tries to get the files' contents out through the result: read them
(plainly, through ``/proc/self/root``, ``/proc/1/root`` and relative paths) at import, in the
build's discover step and in the worker; embed them into an extension with ``.incbin``, or make
the compiler read them (``-include``, ``@file``, a macro-built ``#include``, an include path),
in the build pool's compile step and in an extension the worker builds for itself; then raise or
print what it got, so that it lands in the verdict's detail or the build log.

A *control* file (``--control-file``, by default ``/etc/passwd``, which every sandbox shows on
purpose) is read through the same routes and must come back: otherwise the routes did not work
and the drill proves nothing. The drill passes when every control came back and no secret (the
whole content, or any line of 16 or more characters) appears in any text field of any result.
An attack the daemon answers INFRA_ERROR (the farm's own failure, no verdict) is sent again, three
times in all (``--attempts``); the detail of each INFRA_ERROR is in the report, and a control that
never got a verdict did not come back.
Exit code 0: passed; 1: a secret crossed, or a control did not come back; 2: the drill could not
run (daemon unreachable, a secret file unreadable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import sys
import time
from pathlib import Path

import grpc

from evalfarm.client.channel import TlsConfig, auth_metadata, read_token_file
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

# The smallest CPython extension, no torch headers (it builds in seconds): ``dump()`` returns
# the bytes ``.incbin`` embedded. INCLUDE is where a route puts its #include.
CAPI = r'''
#include <Python.h>
asm(".section .rodata\n.global leak_begin\nleak_begin:\n.incbin \"BLOB\"\n.global leak_end\nleak_end:\n"
    ".byte 0\n.previous\n");
extern "C" const char leak_begin[], leak_end[];
INCLUDE
static PyObject* dump(PyObject*, PyObject*) { return PyBytes_FromStringAndSize(leak_begin, leak_end - leak_begin); }
static PyMethodDef methods[] = {{"dump", dump, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "NAME", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&def); }
'''

# Reads every path through every route, at import: in the build's discover step (its output is
# the build log) and in the worker (its exception is the detail).
READ = r'''
import json, os
import torch.nn as nn

def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(65536).decode("utf-8", "replace")
    except OSError as err:
        return f"<{type(err).__name__}>"

found = {}
for p in PATHS:
    for route in (p, "/proc/self/root" + p, "/proc/1/root" + p, "/proc/1/cwd/" + os.path.basename(p),
                  os.path.join(os.getcwd(), *[".."] * 8) + p):
        found[route] = _read(route)
for pid in (d for d in os.listdir("/proc") if d.isdigit()):
    for part in ("environ", "cmdline"):
        found[f"/proc/{pid}/{part}"] = _read(f"/proc/{pid}/{part}")
report = "FOUND" + json.dumps(found) + "END"
print(report, flush=True)
raise RuntimeError(report)

def _never_called():
    return load_inline  # names load_inline: the build pool runs this module (its discover step)

class ModelNew(nn.Module):
    def forward(self, *args):
        return args[0]
'''

# One extension, built by the build pool (its compile step).
POOL_BUILD = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name=NAME, cpp_sources=SRC, functions=None, no_implicit_headers=True, extra_cflags=CFLAGS,
                  extra_include_paths=INCLUDE_PATHS)
raise RuntimeError("LEAK" + ext.dump().decode("utf-8", "replace") + "END")

class ModelNew(nn.Module):
    def forward(self, *args):
        return args[0]
'''

# Extensions the build pool never sees (the discover step runs the module under another name),
# which the worker builds for itself, one per route, each failure caught (the end of its message
# kept); all of it raised at the end.
WORKER_BUILDS = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

out = []
if __name__ == "evalfarm_candidate":
    for name, src, cflags, include_paths in BUILDS:
        try:
            ext = load_inline(name=name, cpp_sources=src, functions=None, no_implicit_headers=True,
                              extra_cflags=cflags, extra_include_paths=include_paths)
            out.append("LEAK" + ext.dump().decode("utf-8", "replace") + "END")
        except Exception as err:
            out.append(f"{name}: {type(err).__name__}: {str(err)[-300:]}")
    raise RuntimeError("\\n".join(out))

class ModelNew(nn.Module):
    def forward(self, *args):
        return args[0]
'''


@dataclasses.dataclass(frozen=True)
class Attack:
    name: str
    source: str
    # Text the result must contain (the control's content read through this attack's route);
    # "" when the attack has no control of its own.
    must_return: str = ""


def _extension(blob: str, include: str = "", cflags: list[str] | None = None,
               include_paths: list[str] | None = None) -> tuple[str, str, list[str], list[str]]:
    name = f"evalfarm_drill_{secrets.token_hex(6)}"
    src = CAPI.replace("BLOB", blob).replace("INCLUDE", include).replace("NAME", name)
    return name, src, cflags or [], include_paths or []


def _routes(path: str, harmless: str) -> dict[str, tuple[str, str, list[str], list[str]]]:
    """Every way a build may be made to read ``path``; ``harmless`` is a file the sandbox shows,
    embedded where the route itself reads nothing (so that the route is what fails, if anything)."""
    p = Path(path)
    macro = f"#define Q(x) #x\n#define P(x) Q(x)\n#include P({path})"
    return {
        "incbin": _extension(path),
        "incbin /proc/1/root": _extension(f"/proc/1/root{path}"),
        "macro-built #include": _extension(harmless, include=macro),
        "#include through an include path": _extension(harmless, include=f'#include "{p.name}"',
                                                       include_paths=[str(p.parent)]),
        "-include flag": _extension(harmless, cflags=["-include", path]),
        "@file flag": _extension(harmless, cflags=[f"@{path}"]),
    }


def _pool_build(ext: tuple[str, str, list[str], list[str]]) -> str:
    name, src, cflags, include_paths = ext
    return (POOL_BUILD.replace("NAME", repr(name)).replace("SRC", repr(src)).replace("CFLAGS", repr(cflags))
            .replace("INCLUDE_PATHS", repr(include_paths)))


def attacks(secret_paths: list[str], control: str, control_text: str) -> list[Attack]:
    """The drill's candidates. ``control_text``: a line of the control file that must come back
    where an attack reads the control."""
    out = [Attack("read at import (build and worker), /proc", READ.replace("PATHS", repr([*secret_paths, control])),
                  control_text),
           Attack("build pool: incbin of the control", _pool_build(_extension(control)), control_text)]
    for i, path in enumerate(secret_paths):
        routes = _routes(path, control)
        out.append(Attack(f"build pool: incbin of secret {i}", _pool_build(routes["incbin"])))
        out.append(Attack(f"build pool: -include of secret {i}", _pool_build(routes["-include flag"])))
        out.append(Attack(f"build pool: macro-built #include of secret {i}",
                          _pool_build(routes["macro-built #include"])))
    # The control last: a long detail keeps its end.
    worker = [ext for path in secret_paths for ext in _routes(path, control).values()] + [_extension(control)]
    out.append(Attack("worker builds: every route, every secret", WORKER_BUILDS.replace("BUILDS", repr(worker)),
                      control_text))
    return out


def secret_texts(path: str) -> list[str]:
    """What of a secret file must never come back: its whole content and each line of 16 or more
    characters (PEM armour lines and comments aside, which are no secret)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = [ln.strip() for ln in text.splitlines()]
    parts = [ln for ln in lines if len(ln) >= 16 and not ln.startswith(("#", "-----"))]
    return [t for t in [text.strip(), *parts] if t]


def crossed(sample: pb.ScoredSample, secret: dict[str, list[str]]) -> list[str]:
    """The secret files of which something appears in any text field of ``sample``."""
    text = "\n".join([sample.detail, sample.evidence_json, sample.error.message, *sample.evidence.guards])
    return [path for path, parts in secret.items() if any(p in text for p in parts)]


def _score(stub: pb_grpc.EvalFarmStub, source: str, task: str, metadata: tuple, timeout: float) -> pb.ScoredSample:
    request = pb.ScoreRequest(task=pb.TaskRef(name=task), no_cache=True,
                              candidate=pb.Candidate(source=source.encode(), sample_id=f"drill-{secrets.token_hex(4)}"),
                              options=pb.ScoreOptions(num_correctness_inputs=10, timing_budget_s=0.5))
    return stub.Score(request, metadata=metadata, timeout=timeout)


# An INFRA_ERROR says nothing about the candidate (the farm's own failure: a worker that did not
# start, a host short of memory); the drill sends that attack again, as the farm's client does, at
# most this many times in all, and reports the last one's detail where it never got a verdict.
ATTEMPTS = 3


def _score_until_judged(stub: pb_grpc.EvalFarmStub, source: str, task: str, metadata: tuple, timeout: float,
                        attempts: int) -> tuple[pb.ScoredSample, list[pb.ScoredSample]]:
    """The first result that is not INFRA_ERROR (or the last INFRA_ERROR), and every result sent back."""
    results = []
    for _ in range(max(1, attempts)):
        results.append(_score(stub, source, task, metadata, timeout))
        if results[-1].verdict != pb.VERDICT_INFRA_ERROR:
            break
    return results[-1], results


def run(stub: pb_grpc.EvalFarmStub, secret_paths: list[str], control: str, task: str = "L1/1",
        metadata: tuple = (), timeout: float = 900.0, log=print, only: str = "", attempts: int = ATTEMPTS) -> dict:
    """Send every attack (``only``: those whose name contains it; an INFRA_ERROR sent again, ``attempts``
    in all); the report (``passed``, and per attack its verdict, what crossed in any of its results,
    whether its control came back, and the detail of any INFRA_ERROR)."""
    secret = {p: secret_texts(p) for p in secret_paths}
    control_lines = [ln for ln in Path(control).read_text(errors="replace").splitlines() if len(ln) >= 8]
    if not control_lines:
        raise ValueError(f"control file {control} has no line of 8 or more characters to look for")
    rows = []
    for attack in (a for a in attacks(secret_paths, control, control_lines[0]) if only in a.name):
        t0 = time.monotonic()
        sample, results = _score_until_judged(stub, attack.source, task, metadata, timeout, attempts)
        leaked = sorted({path for r in results for path in crossed(r, secret)})
        text = sample.detail + sample.evidence_json
        control_ok = not attack.must_return or attack.must_return in text
        infra = [r.detail[-2000:] for r in results if r.verdict == pb.VERDICT_INFRA_ERROR]
        rows.append({"attack": attack.name, "verdict": pb.Verdict.Name(sample.verdict), "crossed": leaked,
                     "control_returned": control_ok if attack.must_return else None,
                     "infra_errors": infra, "seconds": round(time.monotonic() - t0, 1)})
        status = "FAIL" if leaked or not control_ok else "ok"
        log(f"{status:4}  {attack.name}: {rows[-1]['verdict']}"
            + (f"; CROSSED: {', '.join(leaked)}" if leaked else "")
            + ("; the control did not come back (the route did not work)" if not control_ok else "")
            + (f"; {len(infra)} INFRA_ERROR (sent again), the last: {infra[-1][-500:]}" if infra else ""))
    passed = all(not r["crossed"] and r["control_returned"] is not False for r in rows)
    return {"passed": passed, "secret_files": secret_paths, "control": control, "attacks": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evalfarm.ops.hostile_drill", description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True, help="the daemon, HOST:PORT")
    ap.add_argument("--token-file", default=None, help="the bearer token to send")
    ap.add_argument("--tls-ca", default=None, help="CA certificate (PEM) of the daemon: TLS on")
    ap.add_argument("--tls-server-name", default=None, help="the name its certificate holds (e.g. from 127.0.0.1)")
    ap.add_argument("--secret-file", action="append", required=True,
                    help="a file whose content must never come back (repeat: the token, TLS key, config, ...)")
    ap.add_argument("--control-file", default="/etc/passwd",
                    help="a file every sandbox shows, which must come back (default /etc/passwd)")
    ap.add_argument("--task", default="L1/1", help="a task the daemon knows (the candidates never build a model)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per attack")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    ap.add_argument("--only", default="", help="run only the attacks whose name contains this text")
    ap.add_argument("--attempts", type=int, default=ATTEMPTS,
                    help="sends of an attack in all while the daemon answers INFRA_ERROR (the farm's fault, "
                         f"no verdict; default {ATTEMPTS})")
    args = ap.parse_args(argv)
    try:
        metadata = auth_metadata(read_token_file(args.token_file)) if args.token_file else ()
        if args.tls_ca:
            tls = TlsConfig(root_ca=args.tls_ca, server_name=args.tls_server_name)
            options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
            channel = grpc.secure_channel(args.server, tls.credentials(), options=options)
        else:
            channel = grpc.insecure_channel(args.server)
        with channel:
            report = run(pb_grpc.EvalFarmStub(channel), args.secret_file, args.control_file, args.task,
                         metadata, args.timeout, only=args.only,
                         attempts=args.attempts)
    except (OSError, ValueError) as err:
        print(f"hostile drill: error: {err}", file=sys.stderr)
        return 2
    except grpc.RpcError as err:
        print(f"hostile drill: error: the daemon at {args.server} answered {err.code().name}: {err.details()}",
              file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    print(f"hostile drill: {'PASS' if report['passed'] else 'FAIL'}: {len(report['attacks'])} attacks, "
          f"{sum(1 for r in report['attacks'] if r['crossed'])} crossed, "
          f"{sum(1 for r in report['attacks'] if r['control_returned'] is False)} controls missing")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
