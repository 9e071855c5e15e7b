"""evalfarm: score candidate kernels against a reference, honestly.

    import evalfarm
    result = evalfarm.score("L1/1", "my_candidate.py", evalfarm.ScoreConfig(device="cpu"))
"""

__version__ = "0.1.0"

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.verdict import Verdict

__all__ = ["ConfigError", "Evidence", "ScoreConfig", "ScoreResult", "TimingEvidence", "Verdict", "score"]


def score(task, candidate, config=None):  # noqa: ANN001, ANN201 - re-exported, typed in evalfarm.scoring
    from evalfarm.scoring import score as _score

    return _score(task, candidate, config)
