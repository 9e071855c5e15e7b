import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Convolution theorem: O(T log T) per channel instead of O(T k). Conv1d is a
    cross-correlation, so the kernel is flipped; zero padding to n >= T + k - 1 avoids wrap-around."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(
            channels, channels, kernel_size, groups=channels, padding=kernel_size - 1
        )

    def forward(self, x):
        t = x.shape[-1]
        w = self.conv.weight[:, 0, :].flip(-1)
        n = 1 << (t + w.shape[-1] - 2).bit_length()
        y = torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(w, n=n), n=n)[..., :t]
        return y + self.conv.bias.unsqueeze(-1)
