"""Contrastive RL on a single-host TPU VM slice (e.g. v5e-8); kernels are scored on a GPU evalfarm.

    # on the TPU VM (the trainer loop is single-controller: one host, all its chips):
    learner train --config configs/tpu_pod.py \
        --config.model.hf_dir=gs://bucket/Qwen2.5-Coder-7B-Instruct-local-copy \
        --config.farm.endpoints='("farm1.internal:50051","farm2.internal:50051")' \
        --config.farm.token_file=/etc/evalfarm/token --config.workdir=/mnt/runs/crl-tpu

The HF directory must be a local (or fuse-mounted) path. The mesh puts all chips on the fsdp
axis (rows of every batch are split over them, weights gathered per layer); on a v5p-8 (4 chips,
95 GB each) the 7B memory plan is ~76 GB per chip (`python -m learner.memory_plan --model
qwen2.5-7b --hardware v5p --devices 4 --config configs/tpu_pod.py`). The learner never touches
a GPU itself.
What to expect: the same stages and report as configs/gpu_cluster.py; step time is bound by the
farm unless it has enough GPUs (rl/farm_wait_s in the metrics says how long the learner waited).
"""

from __future__ import annotations

from configs.gpu_cluster import get_config as gpu_config


def get_config():
    c = gpu_config()
    c.workdir = "runs/tpu-pod"
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    c.train.micro_batch_tokens = 32768  # 4 rows of 8192 per micro-batch: one per v5p-8 chip
    c.model.attention_impl = "xla"
    c.sampling.batch_size = 128
    c.rl.tasks_per_step = 32
    return c
