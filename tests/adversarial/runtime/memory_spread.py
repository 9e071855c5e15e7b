# ruff: noqa
# Spreads memory over several processes, each under the per-process address-space limit, so that
# together they hold more than the evaluation's memory limit (finding 8: limits bound single
# objects, not totals). Reports how each child ended by raising (the test reads the detail).
import json
import subprocess
import sys

import torch
import torch.nn as nn

CHILDREN = 4
CHILD_BYTES = 400 << 20
CHILD = (f"import time\nb = bytearray({CHILD_BYTES})\n"
         "for i in range(0, len(b), 4096):\n    b[i] = 1\n"
         "print('held', flush=True)\ntime.sleep(8)\n")
procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True) for _ in range(CHILDREN)]
held = [p.stdout.readline().strip() == "held" for p in procs]
codes = [p.wait() for p in procs]
raise RuntimeError("SPREAD " + json.dumps({"held": held, "codes": codes}) + " END")


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return x
