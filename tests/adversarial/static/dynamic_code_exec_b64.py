# ruff: noqa
# expect: dynamic_code
import base64
import torch.nn as nn

exec(base64.b64decode("cHJpbnQoMSk="))


class ModelNew(nn.Module):
    def forward(self, x):
        name = "thread" + "ing"
        mod = __import__(name)
        return eval("x")
