"""Contrastive RL of a 7B code model on one TPU v5p-8 host (4 chips, 95 GB each); kernels are
scored on a GPU evalfarm.

    # on the TPU VM (the trainer loop is single-controller: one host, all its chips). The loader
    # reads a local directory (config.json, *.safetensors, the tokenizer), so copy the checkpoint first:
    gsutil -m cp -r gs://BUCKET/Qwen2.5-Coder-7B-Instruct /mnt/models/
    learner train --config configs/tpu_pod.py \
        --config.model.hf_dir=/mnt/models/Qwen2.5-Coder-7B-Instruct \
        --config.farm.endpoints='("farm1.internal:50051","farm2.internal:50051")' \
        --config.farm.token_file=/etc/evalfarm/token --config.workdir=/mnt/runs/crl-tpu

The mesh puts all chips on the fsdp axis (rows of every batch are split over them, weights
gathered per layer). Memory plan per chip, `python -m learner.runtime.device_memory --config
configs/tpu_pod.py --model M --hardware H --devices N` (budget: 90% of the chip's memory):

    qwen2.5-7b on v5p x4: ~68 GB of an 85.5 GB budget: fits
    qwen2.5-7b on v5e x8: ~42 GB of a 14.4 GB budget: does not fit
    qwen2.5-1.5b on v5e x8: ~12 GB of a 14.4 GB budget: fits

A v5e-8 (8 chips of 16 GB) cannot hold the 7B run: the bf16 rollout copy alone is 15.2 GB per
chip, on every chip; there, train Qwen2.5-Coder-1.5B (the same command with its directory). The
learner never touches a GPU itself.
What to expect: the same stages and report as configs/gpu_cluster.py; step time is bound by the
farm unless it has enough GPUs (rl/farm_wait_s in the metrics says how long the learner waited).
"""

from __future__ import annotations

from configs.gpu_cluster import get_config as gpu_config


def get_config():
    c = gpu_config()
    c.workdir = "runs/tpu-pod"
    c.model.hf_dir = "/mnt/models/Qwen2.5-Coder-7B-Instruct"  # a local copy: the loader reads files
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    c.train.micro_batch_tokens = 32768  # 4 rows of 8192 per micro-batch: one per v5p-8 chip
    c.model.attention_impl = "xla"
    c.sampling.batch_size = 128
    c.rl.tasks_per_step = 32
    return c
