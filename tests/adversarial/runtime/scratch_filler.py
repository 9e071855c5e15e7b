# ruff: noqa
# Fills its own directory and /dev/shm with many files, each under the file-size limit: a total
# no per-file limit bounds (finding 8: 3 x 600 MB went past a 1 GiB file-size limit). Records how
# much each place took before it refused, and raises with that report (the test reads it in the
# verdict's detail: inside bubblewrap no path of the host is writable to send it elsewhere).
import os
import tempfile

import torch
import torch.nn as nn


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
        places = [tempfile.gettempdir(), "/dev/shm"]
        if os.environ.get("EVALFARM_SANDBOXED_BY"):
            places.append("/tmp")  # bubblewrap's own /tmp (elsewhere it is the host's: left alone)
        for where in places:
            n, why = _fill(where, 1 << 20, 48)  # 48 files of 1 MiB each
            lines.append(f"{where} {n} {why}\n")
        tmp = tempfile.gettempdir()
        ext = os.path.join(tmp, "evalfarm-ext")  # where the worker builds for itself: the judge reads it
        kept = os.path.isdir(ext) and os.stat(ext).st_dev != os.stat(tmp).st_dev
        lines.append(f"kept-ext {int(kept)} -\n")
        raise RuntimeError("FILL-REPORT\n" + "".join(lines) + "END-REPORT")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale + self.bias
