"""The outcome-to-reward rule of the stages that score samples: `rewards(outcomes, rule)` under a
`RewardRule` (self-supervised: success 1/0; RL: the measured speedup, clipped). INFRA_ERROR and
LOST, the farm's fault and not the policy's, get no reward."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from learner.rl.farm import FarmOutcome


@dataclasses.dataclass(frozen=True)
class RewardRule:
    """How a stage turns farm outcomes into rewards (see `rewards`)."""

    kind: str  # a key of REWARD_KINDS
    clip: float = 0.0  # "speedup": the largest reward


def _success_reward(o: FarmOutcome, rule: RewardRule) -> float:
    return float(o.ok)


def _clipped_speedup_reward(o: FarmOutcome, rule: RewardRule) -> float:
    return min(o.speedup or 0.0, rule.clip) if o.ok else 0.0


REWARD_KINDS: dict[str, Callable[[FarmOutcome, RewardRule], float]] = {
    "success": _success_reward,  # self-supervised
    "speedup": _clipped_speedup_reward,  # contrastive RL
}


def rewards(outcomes: Sequence[FarmOutcome], rule: RewardRule) -> list[float | None]:
    """Each outcome's reward under `rule`:

    * INFRA_ERROR or LOST (the farm's fault, not the policy's): None, left out of the update
      and stored without a reward;
    * any other failure (PARSE_FAILURE, a build or correctness failure, a timeout,
      HACK_DETECTED, ...): 0.0;
    * OK: kind "success" (self-supervised) 1.0; kind "speedup" (RL) the measured speedup,
      at most `rule.clip`.

    Known-program measurements and evaluation samples are stored with no reward (None)."""
    score = REWARD_KINDS[rule.kind]
    return [None if o.infra else score(o, rule) for o in outcomes]
