"""PyTorch's ``torch.utils.data.dataloader``, where scripts import the DataLoader from."""

from ...nn.data import DataLoader, default_collate

__all__ = ["DataLoader", "default_collate"]
