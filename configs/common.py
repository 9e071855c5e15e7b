"""The full set of learner options with their defaults; every config file starts from this.

Each section is chosen and read by name in `learner.train`; override any field on the command
line, e.g. ``--config.rl.group_size=16 --config.farm.endpoints='("gpu1:50051","gpu2:50051")'``.
"""

from __future__ import annotations

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.workdir = "runs/default"
    c.stages = "sft,selfsup,rl"  # any subset, run in this order; each starts from the previous one
    c.init_from = ""  # first stage's start: "" = the initial policy, or a stage checkpoint dir
    c.resume_force = False  # resume even when the recorded config.json conflicts (see docs/training.md)
    c.jax_cache_dir = ""  # JAX's compilation cache: "" = $JAX_COMPILATION_CACHE_DIR if set, else
    # <workdir>/jax-cache (a resumed run loads its compiled steps); "off"; or a directory of your own
    c.max_seq_len = 2048

    c.tasks = ml_collections.ConfigDict()
    c.tasks.suite = "builtin"  # "builtin" or a KernelBench checkout path
    c.tasks.ids = ""  # comma list; empty = every task of the suite
    c.tasks.sft_jsonl = ""  # optional extra SFT pairs
    c.tasks.variant_device = "auto"  # which shipped variants are SFT data: "auto" = the farm's device,
    # "any" = only the variants that run everywhere (no compiled CPU- or CUDA-only kernels)
    c.tasks.programs = "fast"  # SFT programs: "fast" = shipped fast variants; "mixture" = also the
    # renamed reference (~1x), a slowed copy (~0.5x) and the wrong variants (speed-mixture experiment)
    c.tasks.heldout = ""  # comma list of tasks kept out of RL (and their fast programs out of SFT)

    c.model = ml_collections.ConfigDict()
    c.model.hf_dir = ""  # pretrained HF directory; empty = train from scratch (demo)
    c.model.vocab_size = 2048  # scratch tokenizer size
    c.model.hidden_size = 128
    c.model.intermediate_size = 384
    c.model.num_layers = 2
    c.model.num_heads = 4
    c.model.num_kv_heads = 2
    c.model.param_dtype = "float32"
    c.model.compute_dtype = "float32"
    c.model.attention_impl = "auto"
    c.model.remat = False
    c.model.chat_template = "auto"  # "auto": prompt Instruct checkpoints through their chat template; "off"

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1

    c.sampling = ml_collections.ConfigDict()
    c.sampling.max_new_tokens = 512
    c.sampling.temperature = 1.0
    c.sampling.top_p = 1.0
    c.sampling.batch_size = 16  # rows per generate call (a fixed shape: compiles once)
    # "static": batches of batch_size rows, each decoded until its longest row ends; "continuous":
    # batch_size rows refilled with the next prompt as each completion ends (learner.lm.engine;
    # one process only). docs/benchmarks.md, "Rollout: static or continuous", says which paid.
    c.sampling.engine = "static"
    c.sampling.engine_chunk = 64  # continuous: decode steps per device call at most
    # Decode steps between two checks of "every row done?" (on a GPU each check is a device-to-host
    # round trip that drains the queue; learner.lm.sampler.unrolled_body). Same tokens for any value.
    c.sampling.steps_per_check = 1

    c.train = ml_collections.ConfigDict()  # how updates run on the mesh (learner.scale)
    c.train.micro_batch_tokens = 0  # tokens per micro-batch over the whole mesh; 0 = one pass
    c.train.hardware = ""  # h100, h200, v5p, ... for the memory plan; "" = what the runtime reports
    c.train.device_memory_gb = 0.0  # overrides train.hardware when > 0
    c.train.memory_headroom = 0.9  # fraction of device memory the memory plan may fill

    c.distributed = ml_collections.ConfigDict()  # multi-host start (learner.distributed)
    c.distributed.mode = "auto"  # "auto": when a coordinator/SLURM/TPU pod is detected; "on"; "off"
    c.distributed.coordinator_address = ""  # host:port of process 0 ("" = environment)
    c.distributed.num_processes = 0  # 0 = environment / auto-detect
    c.distributed.process_id = -1  # -1 = environment / auto-detect

    c.sft = ml_collections.ConfigDict()
    c.sft.steps = 200
    c.sft.batch_size = 8
    c.sft.learning_rate = 3e-4
    c.sft.warmup_steps = 10
    c.sft.decay_steps = 0  # > 0: the rate falls linearly to 0 over the last decay_steps (0 = constant)
    c.sft.weight_decay = 0.0
    c.sft.checkpoint_every = 50
    c.sft.measure_targets = True  # score the SFT targets first; they seed the exemplar buckets

    c.selfsup = ml_collections.ConfigDict()
    c.selfsup.rounds = 2
    c.selfsup.samples_per_task = 4
    c.selfsup.passes = 1  # updates per round, each over all of the round's successes (paper: 1)
    c.selfsup.batch_size = 8
    c.selfsup.learning_rate = 1e-4

    c.rl = ml_collections.ConfigDict()
    c.rl.steps = 20
    c.rl.tasks_per_step = 4
    c.rl.group_size = 4
    c.rl.num_exemplars = 2  # 0 = plain GRPO (no earlier kernels in the prompt)
    c.rl.exemplar_rule = "bucket"  # "bucket": the paper's score-bucket softmax; "random": uniform
    c.rl.exemplar_order = "shuffled"  # how a prompt orders its exemplars: shuffled|ascending|descending
    c.rl.tau = 1.0  # bucket softmax temperature
    c.rl.bucket_width = 0.1
    c.rl.reward_clip = 10.0  # speedup rewards above this are clipped
    c.rl.learning_rate = 2e-5
    c.rl.reference_dtype = "compute"  # weights of the frozen KL reference: "compute" = compute dtype
    c.rl.overlap = "auto"  # "on": sample step t+1 while the farm scores step t (staleness 1);
    # "auto": on, except with a local CPU farm, where sampling would share the cores it times on
    c.rl.grpo = ml_collections.ConfigDict()
    c.rl.grpo.clip_eps = 0.2
    c.rl.grpo.kl_coef = 0.04
    c.rl.grpo.kl_estimator = "k3"
    c.rl.grpo.aggregation = "token"
    c.rl.grpo.adv_std_floor = 0.1
    c.rl.grpo.scale_by_std = True

    c.eval = ml_collections.ConfigDict()
    c.eval.after_each_stage = True
    c.eval.samples_per_task = 2
    c.eval.temperature = 0.7
    c.eval.prompts = "plain,exemplars"  # every stage under the same prompts: plain, and frozen exemplars
    c.eval.num_exemplars = 2  # frozen set: per task the slowest and the fastest known program
    c.eval.exemplars_from = ""  # another run's eval_exemplars.json (arms of one experiment share it)

    c.farm = ml_collections.ConfigDict()
    c.farm.endpoints = ()  # empty: start local daemons; "host:port", "dns:///name:port" or "file:///path"
    c.farm.gpu_model = ""  # score every sample on this GPU model; "" = the first model each task lands on
    c.farm.token_file = ""
    c.farm.tls_ca = ""  # CA certificate (PEM) of the daemons: enables TLS
    c.farm.tls_cert = ""  # client certificate and key for mTLS
    c.farm.tls_key = ""
    c.farm.tls_server_name = ""
    c.farm.local_daemons = 1
    c.farm.local_device = "auto"
    c.farm.local_slots = 1
    c.farm.local_cache_dir = ""  # "" = <workdir>/farm-cache; share one to score equal code equally
    # Local daemons: "best" uses the strong sandbox where the host has it (bubblewrap) and otherwise
    # starts weak with a warning (this run's own samples, on loopback); "strong" refuses without it.
    c.farm.local_sandbox = "best"
    c.farm.sample_deadline_s = 900.0
    c.farm.max_resubmits = 2
    c.farm.wait_timeout_s = 1800.0  # the learner's own bound on waiting for one step's results
    c.farm.options = ml_collections.ConfigDict()
    c.farm.options.num_correctness_inputs = 1000
    c.farm.options.timing_budget_s = 10.0

    c.checkpoint_every = 10  # self-supervised rounds save every round; RL every this many steps
    c.keep_checkpoints = 2
    c.progress = True
    return c
