"""What a caller sends with a candidate: the one signature the client's submit calls share.

``AsyncFarmClient.submit``, ``.score`` and ``.score_nowait`` (and ``FarmClient.submit`` and
``.score``) all take ``(task, source, sample_id=None, **fields)``, with ``fields`` the keyword
arguments of :class:`SubmitFields`; each builds one :class:`Submission`, which the client queues.
A field added here reaches every entry point; an unknown keyword is a ``TypeError`` naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from evalfarm.config import ScoreConfig
from evalfarm.v1 import evalfarm_pb2 as pb

# A task: a built-in id ("L1/1"), a TaskRef, or (file name, source text).
TaskArg = str | pb.TaskRef | tuple[str, str]


class SubmitFields(TypedDict, total=False):
    """The keyword arguments every submit call takes.

    ``options``: a ScoreConfig or a dict of its fields (the daemon's defaults for the rest);
    ``tags``: strings carried back with the result; ``deadline_s``: bounds each dispatch of the
    sample from when it is sent (the client's ``default_deadline_s`` when absent), never time
    spent waiting in a queue.
    """

    options: dict[str, Any] | ScoreConfig | None
    tags: dict[str, str] | None
    deadline_s: float | None


@dataclasses.dataclass(frozen=True)
class Submission:
    task: TaskArg
    source: str
    sample_id: str | None = None
    options: dict[str, Any] | ScoreConfig | None = None
    tags: dict[str, str] | None = None
    deadline_s: float | None = None

    @classmethod
    def of(cls, task: Any, source: str, sample_id: str | None, fields: SubmitFields) -> Submission:
        unknown = set(fields) - set(SubmitFields.__annotations__)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {sorted(unknown)}; a submission takes "
                            f"{sorted(SubmitFields.__annotations__)}")
        return cls(task, source, sample_id, **fields)
