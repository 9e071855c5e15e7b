"""Contrastive RL of a pretrained code model on a GPU host, scoring on a cluster of evalfarm hosts.

    # on every farm host (H100/A100):  evalfarm serve --host 0.0.0.0 --gpus all \
    #     --auth-token-file /etc/evalfarm/token --kernelbench-root /data/KernelBench
    # on the learner host(s):
    learner train --config configs/gpu_cluster.py \
        --config.model.hf_dir=/models/Qwen2.5-Coder-7B-Instruct \
        --config.tasks.suite=/data/KernelBench \
        --config.farm.endpoints='("farm1:50051","farm2:50051")' \
        --config.farm.token_file=/etc/evalfarm/token \
        --config.workdir=/runs/crl-7b

What to expect: SFT on the built-in variants (and any --config.tasks.sft_jsonl pairs) takes
minutes; each self-supervised round and RL step waits on the farm unless the farm keeps up
(metric rl/farm_wait_s). On KernelBench, success rate after SFT is model-dependent; watch
rl/success_rate, rl/speedup_median and the verdict/HACK_DETECTED counts. The report at the end
has the paper's table per stage (workdir/report.{txt,md,json,png}).

What a run costs, from measured times (docs/benchmarks.md: the 7B RL step at these sizes in
"Several GPUs of one host", and the daemon's candidates per minute in "2b. Daemon benchmark"):

    learner: one RL step 81.5 s on 4 x H200 = 0.09 GPU-hours
    farm: 128 candidates a step, 6.15 per minute per H200 slot = 0.35 GPU-hours
    total: 0.44 GPU-hours per RL step; 220 GPU-hours for the 500 RL steps

plus SFT and the self-supervised rounds. A farm of about 16 GPUs scores a step's candidates in
the learner's 81.5 s, so with rl.overlap the learner waits little; fewer GPUs make each step as
long as the farm's share (128 candidates x 9.8 s / GPUs).
The learner runs as one JAX process over the host's GPUs (mesh axes from config.mesh): params,
gradients and AdamW state sharded over the GPUs, a compute-dtype reference, a bf16 rollout copy
per GPU, the KV cache of sampling.batch_size rows, one 65536-token micro-batch. Memory plan per
GPU, `python -m learner.runtime.device_memory --config configs/gpu_cluster.py --model M --hardware H
--devices N` (budget: 90% of the GPU's memory):

    qwen2.5-7b on h200 x8: ~40 GB of a 126.9 GB budget: fits
    qwen2.5-7b on h100 x2: ~114 GB of a 72.0 GB budget: does not fit
"""

from __future__ import annotations

from configs.common import base_config


def get_config():
    c = base_config()
    c.workdir = "runs/gpu-cluster"
    c.tasks.suite = "builtin"
    c.tasks.variant_device = "cuda"
    c.model.hf_dir = "/models/Qwen2.5-Coder-7B-Instruct"
    c.model.param_dtype = "float32"
    c.model.compute_dtype = "bfloat16"
    c.model.remat = True
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    c.train.micro_batch_tokens = 65536  # 8 rows of 8192 per micro-batch: one per GPU of 8
    c.max_seq_len = 8192
    c.sampling.max_new_tokens = 3072
    c.sampling.temperature = 1.0
    c.sampling.batch_size = 64
    # Refill each row as its completion ends: 1.26x the static batches' rollout speed on an H100
    # (docs/benchmarks.md, "Rollout: static batches or continuous batching"). One process only.
    c.sampling.engine = "continuous"
    c.sft.steps = 300
    c.sft.batch_size = 32
    c.sft.learning_rate = 1e-5
    c.selfsup.rounds = 4
    c.selfsup.samples_per_task = 8
    c.selfsup.passes = 1
    c.selfsup.batch_size = 32
    c.selfsup.learning_rate = 5e-6
    c.rl.steps = 500
    c.rl.tasks_per_step = 16
    c.rl.group_size = 8
    c.rl.learning_rate = 1e-6
    c.eval.samples_per_task = 4
    c.farm.endpoints = ("farm1:50051", "farm2:50051")  # or ("dns:///evalfarm.farm.svc:50051",)
    c.farm.options.num_correctness_inputs = 1000
    c.farm.options.timing_budget_s = 10.0
    c.checkpoint_every = 20
    return c
