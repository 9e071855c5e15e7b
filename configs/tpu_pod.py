"""Contrastive RL of a 7B code model on one TPU v5p-8 host (4 chips, 95 GB each), or on a
multi-host v5p slice; kernels are scored on a GPU evalfarm.

One host (v5p-8, 4 chips): one learner process over all its chips.

    # The loader reads a local directory (config.json, *.safetensors, the tokenizer): copy it first.
    gsutil -m cp -r gs://BUCKET/Qwen2.5-Coder-7B-Instruct /mnt/models/
    learner train --config configs/tpu_pod.py \
        --config.model.hf_dir=/mnt/models/Qwen2.5-Coder-7B-Instruct \
        --config.farm.endpoints='("farm1.internal:50051","farm2.internal:50051")' \
        --config.farm.token_file=/etc/evalfarm/token --config.workdir=/mnt/runs/crl-tpu

Several hosts (a v5p-32 slice: 4 hosts x 4 chips): the same command on every host, one learner
process per host, all of one jax.distributed job. On a Cloud TPU VM slice JAX finds the
coordinator, the process count and each host's index itself (`distributed.mode="auto"` sees
TPU_WORKER_HOSTNAMES), so nothing per host is set. Process 0 (worker 0) is the controller: it alone
connects to the farm and writes the exemplar database, metrics and the report; every host runs the
same jitted steps on its share of the rows (docs/training.md, "Several processes"). The workdir
must be one directory every host sees (a Filestore NFS share mounted at /mnt/runs here): orbax
writes each checkpoint from all hosts. Each host needs the model directory and the token file.

    gcloud compute tpus tpu-vm ssh crl-v5p-32 --zone=ZONE --worker=all --command='
        gsutil -m cp -r gs://BUCKET/Qwen2.5-Coder-7B-Instruct /mnt/models/ &&
        cd ~/crl && learner train --config configs/tpu_pod.py \
            --config.model.hf_dir=/mnt/models/Qwen2.5-Coder-7B-Instruct \
            --config.farm.endpoints="(\"farm1.internal:50051\",\"farm2.internal:50051\")" \
            --config.farm.token_file=/etc/evalfarm/token --config.workdir=/mnt/runs/crl-v5p-32'

Elsewhere (one command per host, host i of N): add --config.distributed.coordinator_address=
HOST0:8476 --config.distributed.num_processes=N --config.distributed.process_id=i (or set
LEARNER_COORDINATOR_ADDRESS, LEARNER_NUM_PROCESSES, LEARNER_PROCESS_ID). On GKE, xpk runs the
command on every host of the slice as a JobSet, with the same environment JAX reads:

    xpk workload create --cluster CLUSTER --workload crl-v5p-32 --tpu-type=v5p-32 --num-slices=1 \
        --docker-image=IMAGE --command "learner train --config configs/tpu_pod.py \
        --config.model.hf_dir=/mnt/models/Qwen2.5-Coder-7B-Instruct --config.workdir=/mnt/runs/crl"

A host that dies stops every other host within distributed.heartbeat_timeout_s (100 s) with an
error; run the same command again on every host to resume from the last checkpoint (on the same
or another number of hosts).

The mesh puts all chips of all hosts on the fsdp axis (rows of every batch are split over them,
weights gathered per layer). Memory plan per chip, `python -m learner.runtime.device_memory
--config configs/tpu_pod.py --model M --hardware H --devices N` (budget: 90% of the chip's memory):

    qwen2.5-7b on v5p x4: ~68 GB of an 85.5 GB budget: fits
    qwen2.5-7b on v5p x16: ~29 GB of an 85.5 GB budget: fits
    qwen2.5-7b on v5e x8: ~42 GB of a 14.4 GB budget: does not fit
    qwen2.5-1.5b on v5e x8: ~12 GB of a 14.4 GB budget: fits

On a v5p-32 (16 chips) params, gradients, AdamW state and the reference shrink with the chips
(1.9 + 1.9 + 3.8 + 1.0 GB), the KV cache of the 128 rows too (3.8 GB); the bf16 rollout copy is
replicated (15.2 GB per chip, whatever the slice). A v5e-8 (8 chips of 16 GB) cannot hold the 7B
run: the rollout copy alone is 15.2 GB per chip, on every chip; there, train Qwen2.5-Coder-1.5B
(the same command with its directory). The learner never touches a GPU itself.
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
