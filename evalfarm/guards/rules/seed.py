"""RNG state: reading the seed to predict inputs. Runtime: the seed and the reference outputs
never enter the candidate's process; inputs are made by the judge. Role: testifies."""

from __future__ import annotations

from evalfarm.guards.rules.base import name_rules

RULE_IDS = ("seed_access",)

NAMES = name_rules(
    "seed_access",
    [
        "torch.initial_seed", "torch.seed", "torch.get_rng_state", "torch.set_rng_state",
        "torch.cuda.initial_seed", "torch.cuda.seed", "torch.cuda.seed_all",
        "torch.cuda.get_rng_state", "torch.cuda.get_rng_state_all", "torch.cuda.set_rng_state_all",
        "torch.random.initial_seed", "torch.random.seed", "torch.random.get_rng_state",
        "torch.random.set_rng_state", "torch.random.fork_rng", "torch.default_generator",
        "torch.cuda.default_generators", "torch.Generator.get_state",
        "torch.Generator.initial_seed", "numpy.random.get_state", "numpy.random.set_state",
        "random.getstate", "random.setstate", "torch.cuda.set_rng_state",
    ],
    "reads or restores RNG state",
)
NAMES |= name_rules(
    "seed_access",
    [
        "torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
        "torch.random.manual_seed", "numpy.random.seed", "random.seed",
    ],
    "re-seeds the RNG during the timed call / at import",
    hot_only=True,
)
