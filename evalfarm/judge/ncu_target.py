"""The process Nsight Compute profiles for ``evalfarm score --profile`` on a GPU.

    ncu --profile-from-start off ... python -m evalfarm.judge.ncu_target SPEC.json

Builds the candidate's ModelNew (extensions from the evaluation's build cache), draws fresh
inputs through the task's own ``get_inputs`` (a fresh random seed, never the judge's), makes one
warm-up call, then one call between ``cudaProfilerStart`` and ``cudaProfilerStop``: ncu profiles
the kernels of that call only. Started by ``evalfarm.judge.diagnose.ncu_report`` in a sandboxed
process of its own, after the verdict.
"""

from __future__ import annotations

import json
import secrets
import sys


def main() -> None:
    import torch

    from evalfarm.build import hook
    from evalfarm.build.cache import ExtensionCache
    from evalfarm.tasks.format import Task, exec_module, instantiate_task

    with open(sys.argv[1]) as f:
        spec = json.load(f)
    torch.set_grad_enabled(False)
    device = torch.device(spec.get("device", "cuda:0"))  # "cpu" only to test this module without a GPU
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    task = Task(name=spec["task_name"], source=spec["task_source"], size_profiles=spec["size_profiles"])
    task_mod = instantiate_task(task, spec["profile"])
    torch.manual_seed(secrets.randbits(63))
    init_inputs = task_mod.get_init_inputs()
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in task_mod.get_inputs()]
    hook.install(ExtensionCache(spec["cache_dir"]), spec["arch"])
    cand = exec_module(spec["candidate_source"], "evalfarm_candidate", "candidate.py")
    model = cand.ModelNew(*init_inputs).to(device)
    model(*inputs)  # warm-up: lazy builds, autotuning
    sync()
    if cuda:
        torch.cuda.profiler.start()
    model(*inputs)
    sync()
    if cuda:
        torch.cuda.profiler.stop()
    print("evalfarm ncu_target: profiled one call of ModelNew", flush=True)


if __name__ == "__main__":
    main()
