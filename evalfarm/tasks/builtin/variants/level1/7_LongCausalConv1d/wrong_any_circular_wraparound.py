import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """FFT convolution with n = T: too little zero padding, so the kernel's tail wraps around
    and the first k - 1 outputs pick up samples from the end of the sequence."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(
            channels, channels, kernel_size, groups=channels, padding=kernel_size - 1
        )

    def forward(self, x):
        t = x.shape[-1]
        w = self.conv.weight[:, 0, :].flip(-1)
        y = torch.fft.irfft(torch.fft.rfft(x, n=t) * torch.fft.rfft(w, n=t), n=t)
        return y + self.conv.bias.unsqueeze(-1)
