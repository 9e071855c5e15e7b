"""Build runner: a sandboxed child that runs a candidate's module to build its extensions.

Usage (internal): ``python -m evalfarm.build.runner < request.json``. Building needs the
module's top-level code to run (sources may be computed), so this process is treated as
untrusted: own session, resource limits, a private temp dir, no GPU visible. Errors in the
module other than compile errors are ignored here; the candidate worker reports them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback


def main() -> None:
    # Before anything else (one thread): the candidate's top-level code runs here, so no network,
    # and every process it starts dies with this one (evalfarm.confine). Returns in a forked child
    # when a PID namespace was had; stdin is still ours to read.
    from evalfarm import confine

    confine.die_with_parent()
    confine.enter_namespaces(network=True, pid=os.environ.get(confine.PIDNS_ENV, "1") != "0")
    request = json.loads(sys.stdin.read())
    from evalfarm.sandbox import Limits, apply_limits

    apply_limits(Limits(memory_bytes=request.get("memory_bytes")))
    from evalfarm.build import hook
    from evalfarm.build.cache import ExtensionCache
    from evalfarm.tasks.format import exec_module

    state = hook.install(ExtensionCache(request["cache_dir"]), request["arch"])
    result: dict[str, object] = {"status": "ok"}
    try:
        exec_module(request["source"], "evalfarm_candidate_build", "candidate.py")
    except hook.CompileError:
        result = {"status": "compile_error", "log": state.compile_error}
    except BaseException:  # noqa: BLE001 - any other failure is the worker's to report
        result["module_error"] = hook.truncate(traceback.format_exc(), 4000)
    result["extensions"] = [dataclasses.asdict(b) for b in state.built]
    with open(request["result_path"], "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
