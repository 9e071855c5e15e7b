"""Whose fault a failure is: the one place a failure of the evaluation becomes its verdict.

The rule. The reference worker runs only the task's code and the farm's, so whatever goes wrong
there (an error, a hang, a crash, a bad message) is INFRA_ERROR, never the candidate's. The
candidate worker's failures are the candidate's: its error reports map by kind
(``worker_error_verdict``), a call past its bound is TIMEOUT, a process that ended is RUNTIME_ERROR
(CUDA_FAULT where its last words name a CUDA fault: evalfarm.judge.cuda_fault), a malformed message is HACK_DETECTED
(``receive_failure``). Two failures need a test to tell: a GPU still busy before the reference's
call is the candidate's only if killing the candidate's processes makes it quiet
(``blame_busy_gpu``); and a process of the candidate's cgroup outside its process group escaped the
judge's stop signals (``check_contained``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evalfarm import sandbox
from evalfarm.infra_cause import InfraCause
from evalfarm.judge import framing
from evalfarm.judge.cuda_fault import is_cuda_fault
from evalfarm.judge.quiet import QUIET_WAIT_S
from evalfarm.judge.roles import REFERENCE
from evalfarm.judge.worker_processes import WorkerHandle
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.exchange import Link


class Verdicted(Exception):
    """Ends an evaluation early with a verdict."""

    def __init__(self, verdict: Verdict, detail: str, cause: InfraCause = InfraCause.OTHER) -> None:
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail
        self.cause = cause  # an INFRA_ERROR's cause (evalfarm.infra_cause)


def worker_error_verdict(msg: dict[str, Any], role: str) -> tuple[Verdict, str]:
    """The one place a worker's error report becomes a verdict.

    Anything the reference worker reports is the farm's (or the task's) problem: INFRA_ERROR.
    The candidate worker's reports map by kind; an unknown message is a protocol violation."""
    kind = msg.get("kind")
    detail = str(msg.get("detail", ""))[-8000:]
    if role == REFERENCE:
        return Verdict.INFRA_ERROR, f"the reference worker failed ({kind}): {detail}"[:8000]
    mapping = {
        "compile": Verdict.COMPILE_ERROR, "load": Verdict.LOAD_ERROR, "runtime": Verdict.RUNTIME_ERROR,
        "cuda_fault": Verdict.CUDA_FAULT, "structure": Verdict.INCORRECT, "infra": Verdict.INFRA_ERROR,
    }
    if msg.get("op") == "error" and kind in mapping:
        return mapping[kind], detail
    if msg.get("op") == "error" and kind == "persistent_output":
        return Verdict.HACK_DETECTED, f"guard persistent_output: {detail}"
    return Verdict.HACK_DETECTED, f"guard worker_protocol: unexpected message {str(msg)[:200]}"


def receive_failure(worker: WorkerHandle, err: Exception, what: str, timeout: float,
                    device_type: str) -> Verdicted:
    """A message ``worker`` did not send within ``timeout`` s while ``what`` (its process group is
    killed), a worker that ended, or a bad message (``framing.ProtocolError``), as its verdict."""
    trusted = worker.role == REFERENCE
    if isinstance(err, TimeoutError):
        sandbox.kill_group(worker.proc)
        if trusted:
            return Verdicted(Verdict.INFRA_ERROR, f"the reference worker did not finish {what} within "
                             f"{timeout:.3g} s")
        return Verdicted(Verdict.TIMEOUT, f"the candidate did not finish {what} within {timeout:.3g} s")
    if isinstance(err, framing.PeerClosed):
        desc = worker.exit_description()
        oom = worker.oom_note()
        if oom:
            desc = f"{desc}: {oom}"
        tail = worker.stderr_tail()
        if trusted:
            return Verdicted(Verdict.INFRA_ERROR, f"the reference worker ended while {what}: {desc}"
                             + (f"\n{tail}" if tail else ""))
        verdict = Verdict.CUDA_FAULT if is_cuda_fault(tail, device_type) else Verdict.RUNTIME_ERROR
        return Verdicted(verdict, f"{desc} while {what}" + (f"\n{tail}" if tail else ""))
    if trusted:
        return Verdicted(Verdict.INFRA_ERROR, f"the reference worker sent a bad message: {err}")
    return Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: {err}")


def blame_busy_gpu(link: Link, waited_s: float) -> Verdicted:
    """The reference worker found the GPU busy before its call, with the candidate's process
    stopped. Whose work is it? Kill the candidate's processes (their GPU contexts, and all work
    they queued, go with them) and ask again: quiet now, it was the candidate's; still busy,
    something outside this evaluation shares the GPU, which is no verdict on the candidate."""
    sandbox.kill_group(link.cand.proc)
    if link.cand.cgroup is not None:
        link.cand.cgroup.kill()
    link.resume(REFERENCE)
    framing.send_json(link.ref.conn, {"op": "quiet"})
    reply = link.recv(link.ref, QUIET_WAIT_S + 30.0, "checking the GPU again after the candidate was killed")
    if reply.get("op") != "quiet":
        raise Verdicted(*worker_error_verdict(reply, link.ref.role))
    again = float(reply.get("waited_s", 0.0))
    if reply.get("quiet"):
        return Verdicted(Verdict.HACK_DETECTED, (
            f"guard lingering_gpu_work: the GPU stayed busy for {waited_s:.1f} s after the candidate's call "
            f"returned and its process was stopped, and went quiet {again:.2f} s after its process was "
            "killed: it left work running outside its timed call"))
    return Verdicted(Verdict.INFRA_ERROR, (
        f"the GPU stayed busy for {waited_s:.1f} s before the reference's call, and {again:.1f} s more "
        "after the candidate's process was killed: work from outside this evaluation shares the GPU "
        "(nvidia-smi lists the processes using it); give the farm its GPUs alone"))


def check_contained(worker: WorkerHandle) -> None:
    """HACK_DETECTED when a process of the candidate's cgroup left its process group.

    Stopping a worker stops its process group; a process that left it (setsid, setpgid) would
    run on while the candidate is stopped: during the reference's call, or while the next
    inputs are written, which it could read ahead. Checked after each of the candidate's calls,
    once its group was stopped. Where the worker has no cgroup nothing can be listed, and the
    static rule process_abuse is what refuses such code."""
    escaped = worker.escaped_processes()
    if escaped:
        raise Verdicted(Verdict.HACK_DETECTED, (
            f"guard escaped_process: {len(escaped)} process(es) of the candidate left its process group "
            f"(setsid or setpgid; pids {', '.join(map(str, escaped[:5]))}), so they would keep running while "
            "its process is stopped"))
