"""PyTorch's ``torch.utils.data``: datasets and the DataLoader of ``minitorch_exp.nn.data``
at PyTorch's path."""

from ..nn.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)

__all__ = ["DataLoader", "Dataset", "DistributedSampler", "Subset", "TensorDataset",
           "default_collate", "random_split"]
