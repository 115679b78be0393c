"""PyTorch's ``torch.utils.data``: datasets and the DataLoader of ``minitorch_exp.nn.data``
at PyTorch's path."""

from ...nn.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)
from ...nn.samplers import BatchSampler, RandomSampler, Sampler, SequentialSampler
from . import dataloader, sampler

__all__ = ["BatchSampler", "DataLoader", "Dataset", "DistributedSampler", "RandomSampler",
           "Sampler", "SequentialSampler", "Subset", "TensorDataset", "dataloader",
           "default_collate", "random_split", "sampler"]
