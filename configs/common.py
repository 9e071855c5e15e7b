"""The full set of learner options with their defaults; every config file starts from this.

Each section is chosen and read by name in the trainer (`learner.train`, `learner.stages`); override any field on the command
line, e.g. ``--config.rl.group_size=16 --config.farm.endpoints='("gpu1:50051","gpu2:50051")'``.

Every field's comment at the end of its line is its one-line description: `learner train --help`
prints it beside the field's default (learner.config_docs reads it from this file). A longer
note goes on comment lines above the field.
"""

from __future__ import annotations

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0  # seeds the model's initial weights, sampling and task order
    c.workdir = "runs/default"  # where checkpoints, metrics, the exemplar database and the report go
    c.stages = "sft,selfsup,rl"  # any subset, run in this order; each starts from the previous one
    c.init_from = ""  # first stage's start: "" = the initial policy, or a stage checkpoint dir
    c.resume_force = False  # resume even when the recorded config.json conflicts (see docs/training.md)
    # "" = $JAX_COMPILATION_CACHE_DIR if set, else <workdir>/jax-cache (a resumed run loads its
    # compiled steps); "off"; or a directory of your own.
    c.jax_cache_dir = ""  # JAX's compilation cache directory ("" = $JAX_COMPILATION_CACHE_DIR or <workdir>/jax-cache)
    c.max_seq_len = 2048  # tokens of prompt plus completion, for sampling and training

    c.tasks = ml_collections.ConfigDict()  # which tasks the run trains and evaluates on
    c.tasks.suite = "builtin"  # "builtin" or a KernelBench checkout path
    c.tasks.ids = ""  # the suite's tasks to use, a comma list; empty = every task
    c.tasks.sft_jsonl = ""  # optional extra SFT pairs (JSONL of task and code)
    # "any" keeps only the variants that run everywhere (no compiled CPU- or CUDA-only kernels).
    c.tasks.variant_device = "auto"  # which shipped variants are SFT data: "auto" = those for the farm's device
    # "mixture" adds the renamed reference (~1x), a slowed copy (~0.5x) and the wrong variants
    # (the speed-mixture experiment).
    c.tasks.programs = "fast"  # SFT programs: "fast" = the shipped fast variants; "mixture" = programs of several speeds
    c.tasks.heldout = ""  # comma list of tasks kept out of RL (and their fast programs out of SFT)

    c.model = ml_collections.ConfigDict()  # the policy: a pretrained checkpoint, or a small model from scratch
    c.model.hf_dir = ""  # pretrained HF directory; empty = train from scratch (demo)
    c.model.vocab_size = 2048  # scratch tokenizer size (from scratch only)
    c.model.hidden_size = 128  # model width (from scratch only; a checkpoint has its own)
    c.model.intermediate_size = 384  # MLP width (from scratch only)
    c.model.num_layers = 2  # decoder layers (from scratch only)
    c.model.num_heads = 4  # attention heads (from scratch only)
    c.model.num_kv_heads = 2  # key/value heads, grouped-query attention (from scratch only)
    c.model.param_dtype = "float32"  # dtype of the trained weights and optimizer state
    c.model.compute_dtype = "float32"  # dtype of activations and matmuls
    c.model.attention_impl = "auto"  # "auto": cuDNN on a GPU with 16-bit compute, else XLA
    c.model.remat = False  # recompute each layer's activations in the backward pass (less memory, more time)
    c.model.chat_template = "auto"  # "auto": prompt Instruct checkpoints through their chat template; "off"

    c.mesh = ml_collections.ConfigDict()  # device mesh axes (learner.lm.sharding); -1 = the devices left
    c.mesh.data = 1  # data-parallel axis: batch rows split, weights replicated
    c.mesh.fsdp = -1  # fully sharded axis: batch rows and weights split, weights gathered per layer
    c.mesh.tensor = 1  # tensor-parallel axis: weight matrices split

    c.sampling = ml_collections.ConfigDict()  # how the policy generates completions
    c.sampling.max_new_tokens = 512  # completion length cap
    c.sampling.temperature = 1.0  # sampling temperature for training rollouts
    c.sampling.top_p = 1.0  # nucleus sampling: keep the smallest token set with this much probability
    c.sampling.batch_size = 16  # rows per generate call (a fixed shape: compiles once)
    # "static": batches of batch_size rows, each decoded until its longest row ends; "continuous":
    # batch_size rows refilled with the next prompt as each completion ends (learner.lm.engine;
    # one process only). docs/benchmarks.md, "Rollout: static or continuous", says which paid.
    c.sampling.engine = "static"  # "static" batches, or "continuous" batching (rows refilled as they end)
    c.sampling.engine_chunk = 64  # continuous engine: at most this many decode steps per device call
    # On a GPU each check is a device-to-host round trip that drains the queue
    # (learner.lm.sampler.unrolled_body). Same tokens for any value.
    c.sampling.steps_per_check = 1  # decode steps between two checks of "every row done?"

    c.train = ml_collections.ConfigDict()  # how updates run on the mesh (learner.runtime.scale)
    c.train.micro_batch_tokens = 0  # tokens per micro-batch over the whole mesh; 0 = one pass
    c.train.hardware = ""  # h100, h200, v5p, ... for the memory plan; "" = what the runtime reports
    c.train.device_memory_gb = 0.0  # device memory (GB) for the memory plan; overrides train.hardware when > 0
    c.train.memory_headroom = 0.9  # fraction of device memory the memory plan may fill

    c.distributed = ml_collections.ConfigDict()  # multi-host start (learner.runtime.distributed)
    c.distributed.mode = "auto"  # start multi-host JAX: "auto" when a coordinator/SLURM/TPU pod is detected; "on"; "off"
    c.distributed.coordinator_address = ""  # host:port of process 0 ("" = environment)
    c.distributed.num_processes = 0  # processes of the job (0 = from the environment / auto-detect)
    c.distributed.process_id = -1  # this process's index (-1 = from the environment / auto-detect)
    c.distributed.heartbeat_timeout_s = 100  # a process silent this long is dead: every other process stops with an error
    c.distributed.wait_timeout_s = 0.0  # longest wait for process 0's farm results and decisions (0 = farm.wait_timeout_s + 900)

    c.sft = ml_collections.ConfigDict()  # stage 1: supervised fine-tuning on (task prompt, code) pairs
    c.sft.steps = 200  # optimizer steps
    c.sft.batch_size = 8  # (prompt, code) pairs per step
    c.sft.learning_rate = 3e-4  # peak learning rate (AdamW)
    c.sft.warmup_steps = 10  # steps of linear warm-up to the peak rate
    c.sft.decay_steps = 0  # > 0: the rate falls linearly to 0 over the last decay_steps (0 = constant)
    c.sft.weight_decay = 0.0  # AdamW weight decay
    c.sft.checkpoint_every = 50  # save a checkpoint every this many steps
    c.sft.measure_targets = True  # score the SFT targets first; they seed the exemplar buckets

    c.selfsup = ml_collections.ConfigDict()  # stage 2: sample, score, train on the successes (reward 1/0)
    c.selfsup.rounds = 2  # sample-score-update rounds
    c.selfsup.samples_per_task = 4  # samples per task in each round
    c.selfsup.passes = 1  # updates per round, each over all of the round's successes (paper: 1)
    c.selfsup.batch_size = 8  # successes per update micro-step
    c.selfsup.learning_rate = 1e-4  # learning rate (AdamW)

    c.rl = ml_collections.ConfigDict()  # stage 3: contrastive RL (GRPO, prompts with scored exemplars)
    c.rl.steps = 20  # RL steps
    c.rl.tasks_per_step = 4  # prompts (tasks) per step
    c.rl.group_size = 4  # samples per prompt (the GRPO group)
    c.rl.num_exemplars = 2  # earlier kernels with their scores in each RL prompt (0 = plain GRPO)
    c.rl.exemplar_rule = "bucket"  # "bucket": the paper's score-bucket softmax; "random": uniform
    c.rl.exemplar_order = "shuffled"  # how a prompt orders its exemplars: shuffled|ascending|descending
    c.rl.tau = 1.0  # bucket softmax temperature
    c.rl.bucket_width = 0.1  # width of an exemplar score bucket (delta-s)
    c.rl.reward_clip = 10.0  # speedup rewards above this are clipped
    c.rl.learning_rate = 2e-5  # learning rate (AdamW)
    c.rl.reference_dtype = "compute"  # weights of the frozen KL reference: "compute" = compute dtype
    # "auto": on, except with a local CPU farm, where sampling would share the cores it times on.
    c.rl.overlap = "auto"  # "on": sample step t+1 while the farm scores step t (staleness 1)
    c.rl.grpo = ml_collections.ConfigDict()  # the GRPO loss (learner.rl.grpo)
    c.rl.grpo.clip_eps = 0.2  # clip range of the importance ratio
    c.rl.grpo.kl_coef = 0.04  # weight of the KL penalty to the frozen reference (0: no reference kept)
    c.rl.grpo.kl_estimator = "k3"  # per-token KL estimator: k1, k2 or k3
    c.rl.grpo.aggregation = "token"  # loss averaged over all completion tokens ("token") or per sequence
    c.rl.grpo.adv_std_floor = 0.1  # lower bound on the group std used to scale advantages
    c.rl.grpo.scale_by_std = True  # advantages divided by the group std (False: mean-centering only)

    c.eval = ml_collections.ConfigDict()  # the evaluation after each stage (the paper's table)
    c.eval.after_each_stage = True  # evaluate the policy after each stage
    c.eval.samples_per_task = 2  # samples per task and prompt form
    c.eval.temperature = 0.7  # sampling temperature for evaluation
    c.eval.prompts = "plain,exemplars"  # prompt forms every stage is evaluated under: plain, and frozen exemplars
    c.eval.num_exemplars = 2  # exemplars of the frozen set: per task the slowest and the fastest known program
    c.eval.exemplars_from = ""  # take the frozen set from another run's eval_exemplars.json (arms of one experiment share it)

    c.farm = ml_collections.ConfigDict()  # where the kernels are scored (evalfarm daemons)
    c.farm.endpoints = ()  # daemons to score on: "host:port", "dns:///name:port" or "file:///path"; empty: start local ones
    c.farm.gpu_model = ""  # score every sample on this GPU model; "" = the first model each task lands on
    c.farm.token_file = ""  # file holding the daemons' bearer token
    c.farm.tls_ca = ""  # CA certificate (PEM) of the daemons: enables TLS
    c.farm.tls_cert = ""  # client certificate for mTLS (with tls_key)
    c.farm.tls_key = ""  # client key for mTLS
    c.farm.tls_server_name = ""  # expected name in the daemons' certificates
    c.farm.local_daemons = 1  # local daemons started when endpoints is empty
    c.farm.local_device = "auto"  # local daemons' slots: "auto" (GPUs when present), "cpu" or "cuda"
    c.farm.local_slots = 1  # CPU slots per local daemon
    c.farm.local_cache_dir = ""  # local daemons' result and build cache ("" = <workdir>/farm-cache); share one to score equal code equally
    c.farm.local_sandbox = "best"  # local daemons' sandbox: "best" (strong where the host has bubblewrap, else weak with a warning: this run's own samples on loopback) or "strong" (refuse without it)
    c.farm.sample_deadline_s = 900.0  # an evaluation running past this from its dispatch is TIMEOUT
    c.farm.max_resubmits = 2  # times an INFRA_ERROR or lost sample is sent again, to another daemon
    c.farm.wait_timeout_s = 1800.0  # the learner's own bound on waiting for one step's results
    c.farm.options = ml_collections.ConfigDict()  # evalfarm scoring options (evalfarm.config.ScoreConfig)
    c.farm.options.num_correctness_inputs = 1000  # correctness inputs per candidate
    c.farm.options.timing_budget_s = 10.0  # timing budget per candidate, seconds
    c.farm.options.reverify_above = 3.0  # re-measure a score above this, or above 2x the task's best (0 = never)

    c.checkpoint_every = 10  # RL saves a checkpoint every this many steps (self-supervised: every round)
    c.keep_checkpoints = 2  # checkpoints kept per stage
    c.progress = True  # progress bars on the terminal (False: a log line every 10 steps)
    return c
