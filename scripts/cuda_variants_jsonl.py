"""Write every built-in CUDA variant as a batch-scoring JSONL line (task, candidate path, sample_id).

    python scripts/cuda_variants_jsonl.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.tasks.suite import builtin_suite  # noqa: E402


def main(out: str) -> None:
    suite = builtin_suite()
    with open(out, "w") as f:
        for e in suite.entries:
            for v in suite.variants(e.task_id):
                if v.devices == "cuda":
                    f.write(json.dumps({"task": e.task_id, "candidate": str(v.path.resolve()),
                                        "sample_id": f"{e.task_id}/{v.kind}_{v.label}"}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
