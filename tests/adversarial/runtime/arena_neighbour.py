# ruff: noqa
# Looks for arenas where they used to be (files in /dev/shm: finding 5 NaN-filled a neighbour's
# there) and among its own open descriptors, and NaN-fills every descriptor it finds. It also reports how its own arenas are mapped. Answers
# correctly itself; when it holds any arena descriptor it names it in a load error. What it sees
# in /dev/shm goes to REPORT_PATH (filled in by the test); it writes nothing there, since on a
# shared machine other people's evaluations may live there.
import os

import torch
import torch.nn as nn

REPORT_PATH = ""


def _poison(path: str) -> str:
    try:
        with open(path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            f.write(b"\xff" * min(size, 1 << 20))  # 0xffffffff is a NaN in float32
        return path
    except OSError:
        return ""


def _scan() -> list[str]:
    found = []
    if REPORT_PATH:
        with open("/proc/self/maps") as maps:
            mapped = {line.split(maxsplit=5)[-1].strip() for line in maps if "arena" in line}
        with open(REPORT_PATH, "a") as f:
            f.writelines(f"mapped {path}\n" for path in sorted(mapped))
            if os.path.isdir("/dev/shm"):
                f.writelines(f"shm {name}\n" for name in os.listdir("/dev/shm") if "arena" in name)
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "memfd:" in target or "arena" in target:
            found.append(f"fd {fd} -> {target}")
            _poison(f"/proc/self/fd/{fd}")
    return found


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        found = _scan()
        if found:
            raise RuntimeError(f"reachable arenas: {found}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _scan()  # again while the neighbour is mid-evaluation
        return torch.addcmul(self.bias, torch.relu(x), torch.tensor(self.scale))
