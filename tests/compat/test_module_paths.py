"""The module paths PyTorch scripts import, at the same paths here: ``torch.nn.modules.*``,
``torch.utils.data.dataloader``/``sampler``, ``torch.backends.*``, ``torch.onnx`` -- each
name where PyTorch has it (checked against PyTorch when installed)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import minitorch_exp as mt

PATHS = {
    "nn.modules": ["Module", "Linear", "Sequential", "ModuleList", "CrossEntropyLoss", "ReLU"],
    "nn.modules.module": ["Module"],
    "nn.modules.loss": ["CrossEntropyLoss", "MSELoss", "NLLLoss", "BCEWithLogitsLoss"],
    "nn.modules.linear": ["Linear", "Identity"],
    "nn.modules.container": ["Sequential", "ModuleList", "ModuleDict", "ParameterList",
                             "ParameterDict"],
    "nn.modules.activation": ["ReLU", "Tanh", "GELU", "Softmax"],
    "nn.modules.conv": ["Conv1d", "Conv2d"],
    "nn.modules.pooling": ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"],
    "nn.modules.batchnorm": ["BatchNorm1d", "BatchNorm2d"],
    "nn.modules.normalization": ["LayerNorm"],
    "nn.modules.dropout": ["Dropout", "Dropout2d"],
    "nn.modules.sparse": ["Embedding"],
    "nn.modules.flatten": ["Flatten"],
    "nn.utils": ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector",
                 "vector_to_parameters", "get_total_norm"],
    "utils.data.dataloader": ["DataLoader", "default_collate"],
    "utils.data.sampler": ["Sampler", "SequentialSampler", "RandomSampler", "BatchSampler"],
    "utils.data": ["Sampler", "SequentialSampler", "RandomSampler", "BatchSampler"],
    "backends.cudnn": ["benchmark", "deterministic", "enabled", "is_available"],
    "backends.mps": ["is_available"],
    "onnx": ["export"],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_paths_and_names_exist_here_and_in_torch(path):
    mine = importlib.import_module(f"minitorch_exp.{path}")
    assert all(hasattr(mine, name) for name in PATHS[path]), path
    try:
        theirs = importlib.import_module(f"torch.{path}")
    except ImportError:
        return
    assert all(hasattr(theirs, name) for name in PATHS[path]), path


def test_the_classes_are_the_nn_ones():
    from minitorch_exp.nn.modules.loss import CrossEntropyLoss
    from minitorch_exp.nn.modules.module import Module
    from minitorch_exp.utils.data.dataloader import DataLoader
    assert Module is mt.nn.Module and CrossEntropyLoss is mt.nn.CrossEntropyLoss
    assert DataLoader is mt.utils.data.DataLoader


def test_cudnn_flags_are_kept_and_change_nothing():
    import minitorch_exp as torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.is_available()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    assert not torch.backends.mps.is_available()


def test_onnx_export_says_it_is_not_supported():
    import minitorch_exp as torch
    with pytest.raises(NotImplementedError, match="ONNX"):
        torch.onnx.export(torch.nn.Linear(2, 2), torch.zeros(1, 2), "model.onnx")


def test_a_script_importing_them_runs():
    script = ("import minitorch_exp as torch\n"
              "import minitorch_exp.backends.cudnn as cudnn\n"
              "from minitorch_exp.nn.modules.module import Module\n"
              "from minitorch_exp.utils.data.dataloader import DataLoader\n"
              "cudnn.benchmark = True\n"
              "class Net(Module):\n"
              "    def __init__(self):\n"
              "        super().__init__()\n"
              "        self.blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2)])\n"
              "    def forward(self, x):\n"
              "        return self.blocks[0](x)\n"
              "ds = torch.utils.data.TensorDataset(torch.randn(4, 2))\n"
              "for (x,) in DataLoader(ds, batch_size=2):\n"
              "    Net()(x).sum().backward()\n"
              "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip() == "ok", out.stderr
