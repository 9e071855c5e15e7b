"""Several CPU processes of one `jax.distributed` job on loopback, for the multi-process tests:
a free coordinator port, each process's environment, and a run that waits for all of them."""

from __future__ import annotations

import os
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_env(port: int, n: int, pid: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with process ``pid`` of an ``n``-process job
    whose coordinator listens on 127.0.0.1:``port`` (learner.runtime.distributed reads these)."""
    return {**(os.environ if base is None else base), "LEARNER_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "LEARNER_NUM_PROCESSES": str(n), "LEARNER_PROCESS_ID": str(pid)}


def run_job(argv: list[str], envs: list[dict[str, str]], timeout_s: float) -> list[str]:
    """Run ``argv`` once per environment, all at once; wait for every process (all are killed if one
    outlives ``timeout_s``) and assert each exited 0, showing the tails of their output if not.
    Returns each process's output (stdout and stderr together)."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for env in envs]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out)
    assert all(p.returncode == 0 for p in procs), "\n-----\n".join(o[-4000:] for o in outputs)
    return outputs
