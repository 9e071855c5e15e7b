import a_module_that_does_not_exist  # noqa: F401
import torch.nn as nn


class ModelNew(nn.Module):
    pass
