"""Build runner: sandboxed children of the build pool, in one of three modes.

Usage (internal): ``python -m evalfarm.build.runner < request.json``.

* ``discover`` (default): runs the candidate's module to find its ``load_inline`` calls (sources
  may be computed). Candidate code runs here, so the process is untrusted: own session, resource
  limits, a private temp dir, no GPU visible, and its own network namespace (as the worker has).
  It compiles nothing, reads no cache and writes nothing outside its directory: every call gets a
  stand-in module, and its spec is reported (the pool looks each up in the cache itself). A call
  whose build the pool already saw fail (``failed`` in the request) raises that failure, as
  load_inline would: a module that catches it and calls load_inline again (a corrected source) has
  that call discovered too. Errors in the module are ignored here (the candidate worker reports
  them), except that an uncaught build failure is named (``uncaught_failure``: its key).
* ``compile``: compiles one reported spec into a private directory, running no candidate Python
  code; the trusted pool hashes and installs the result (``ExtensionCache.install``).
* ``toolchain``: prints the toolchain description the cache key covers (trusted; no candidate input).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback


def _isolate(request: dict) -> list[str]:
    """Before anything else (one thread): candidate code may run here (``discover``), so no
    network, and every process it starts dies with this one (evalfarm.sandbox.confine). Returns in a
    forked child when a PID namespace was had. Run by root, it then goes on as the unprivileged
    uid workers use (its directory handed to that uid first), before any candidate input is read."""
    from evalfarm.sandbox import Limits, apply_limits, bubblewrap, confine

    confine.die_with_parent()
    notes = confine.enter_sandbox()
    apply_limits(Limits(memory_bytes=request.get("memory_bytes")))
    who = confine.target_identity()
    if who is not None:
        # Masking what the uid cannot traverse needs a mount namespace of this process's own.
        private = bool(os.environ.get(bubblewrap.INSIDE_ENV)) or confine.PRIVATE_MOUNTS
        notes += confine.drop_privileges(*who, writable=[os.getcwd()],
                                         needed=confine.needed_paths() if private else [])
    from evalfarm.sandbox import seccomp

    return [*notes, seccomp.install()]


def discover(request: dict) -> dict:
    from evalfarm.build import hook
    from evalfarm.build.cache import ExtensionCache
    from evalfarm.tasks.format import exec_module

    # An empty cache of its own: every call is reported, none is loaded (the cache is not in view).
    empty = ExtensionCache(os.path.join(os.getcwd(), "no-cache"))
    state = hook.install(empty, request["arch"], discover=True, failed=request.get("failed") or None)
    result: dict[str, object] = {"status": "ok"}
    try:
        exec_module(request["source"], "evalfarm_candidate_build", "candidate.py")
    except BaseException as err:  # noqa: BLE001 - any failure is the worker's to report
        result["module_error"] = hook.truncate(traceback.format_exc(), 4000)
        uncaught = state.raised_by(err)
        if uncaught is not None:
            result["uncaught_failure"] = uncaught.key
    result["extensions"] = [dataclasses.asdict(b) for b in state.built]
    result["raised"] = [f.key for f in state.failures]
    return result


def compile_spec(request: dict) -> dict:
    from torch.utils.cpp_extension import load_inline

    from evalfarm.build import hook

    spec = request["spec"]
    kwargs = {k: spec[k] for k in ("functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                                   "extra_include_paths", "with_cuda", "is_python_module",
                                   "with_pytorch_error_handling", "no_implicit_headers") if k in spec}
    if isinstance(kwargs["functions"], list) and kwargs["functions"] and isinstance(kwargs["functions"][0], list):
        kwargs["functions"] = dict(kwargs["functions"])  # a {name: docstring} map, stored as sorted pairs
    from evalfarm.build import includes

    refused = includes.refused_include(spec["cpp_sources"] + spec["cuda_sources"], request["build_dir"])
    if refused:
        return {"status": "refused", "log": f"building extension {spec['name']!r} refused: {refused}"}
    try:
        load_inline(spec["name"], spec["cpp_sources"], spec["cuda_sources"] or None,
                    build_directory=request["build_dir"], **kwargs)
    except Exception as err:  # noqa: BLE001 - the compiler's message is the verdict's detail
        text = includes.redact(f"building extension {spec['name']!r} failed:\n{err}", request["build_dir"])
        # What load_inline raised (its type and message, redacted alike): the worker raises the same.
        return {"status": "compile_error", "log": hook.truncate(text), "type": type(err).__name__,
                "message": hook.truncate(includes.redact(str(err), request["build_dir"]))}
    return {"status": "ok"}


def main() -> None:
    request = json.loads(sys.stdin.read())
    mode = request.get("mode", "discover")
    if mode == "toolchain":
        from evalfarm.build.cache import toolchain

        result: dict = {"tools": {str(c): toolchain(c, request["arch"]) for c in (False, True)}}
    else:
        notes = _isolate(request)
        result = discover(request) if mode == "discover" else compile_spec(request)
        result["isolation"] = notes
    with open(request["result_path"], "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
