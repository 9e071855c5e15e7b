"""Subprocess: tiny training loop with checkpoints every 2 steps; resumes if checkpoints exist.

usage: resume_worker.py CKPT_DIR OUT_DIR TOTAL_STEPS SLEEP_S
Prints "RESUMED <step>" / "SAVED <step>" lines; writes OUT_DIR/params_<step>.npz after each step.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from tiny_setup import TINY_CFG, flat_params, tiny_batch  # noqa: E402

from learner.lm.model import Transformer  # noqa: E402
from learner.runtime.checkpoint import Checkpointer  # noqa: E402
from learner.runtime.losses import lm_loss_sum_count  # noqa: E402
from learner.runtime.train_step import (  # noqa: E402
    OptimizerConfig,
    create_train_state,
    make_optimizer,
    train_step,
)


def main() -> None:
    ckpt_dir, out_dir, total, sleep_s = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    out_dir.mkdir(parents=True, exist_ok=True)
    tx = make_optimizer(OptimizerConfig(learning_rate=3e-3, weight_decay=0.01, grad_clip_norm=1.0))
    state = create_train_state(Transformer(TINY_CFG, rngs=nnx.Rngs(0)), tx, seed=0)
    ckpt = Checkpointer(ckpt_dir, max_to_keep=2, save_interval_steps=2)
    if ckpt.latest_step() is not None:
        state = ckpt.restore(state)
        step = int(state.step)
        np.savez(out_dir / f"resumed_{step}.npz", **flat_params(state.params))
        print(f"RESUMED {step}", flush=True)
    while int(state.step) < total:
        batch = jax.tree.map(jax.numpy.asarray, tiny_batch(int(state.step)))
        state, _ = train_step(state, batch, lm_loss_sum_count)
        step = int(state.step)
        np.savez(out_dir / f"params_{step}.npz", **flat_params(state.params))
        if ckpt.save(state):
            ckpt.wait()
            print(f"SAVED {step}", flush=True)
        time.sleep(sleep_s)
    ckpt.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
