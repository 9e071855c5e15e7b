# ruff: noqa
# Fills its own directory and /dev/shm with many files, each under the file-size limit: a total
# no per-file limit bounds (finding 8: 3 x 600 MB went past a 1 GiB file-size limit). Records how
# much each place took before it refused, in REPORT_PATH (filled in by the test), and scores honestly.
import os
import tempfile

import torch
import torch.nn as nn

REPORT_PATH = ""


def _fill(directory: str, chunk: int, count: int) -> tuple[int, str]:
    block = b"\0" * chunk
    written = 0
    try:
        for i in range(count):
            with open(os.path.join(directory, f"fill-{os.getpid()}-{i}.bin"), "wb") as f:
                f.write(block)
            written += chunk
    except OSError as err:
        return written, type(err).__name__ + ": " + (err.strerror or "")
    return written, "not refused"


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        lines = []
        for where in (tempfile.gettempdir(), "/dev/shm"):
            n, why = _fill(where, 1 << 20, 48)  # 48 files of 1 MiB each
            lines.append(f"{where} {n} {why}\n")
        tmp = tempfile.gettempdir()
        ext = os.path.join(tmp, "evalfarm-ext")  # where the worker builds for itself: the judge reads it
        kept = os.path.isdir(ext) and os.stat(ext).st_dev != os.stat(tmp).st_dev
        with open(REPORT_PATH, "w") as f:
            f.writelines(lines)
            f.write(f"kept-ext {int(kept)} -\n")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale + self.bias
