"""PyTorch's ``torch.utils.data.sampler``."""

from ...nn.samplers import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler"]
