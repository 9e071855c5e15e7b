# ruff: noqa
# expect: host_thread
import torch.nn as nn

cf = __import__("concurrent.futures", fromlist=["ThreadPoolExecutor"])
_pool = cf.ThreadPoolExecutor(2)


class ModelNew(nn.Module):
    def forward(self, x):
        fut = _pool.submit(lambda: x * 2)
        return x
