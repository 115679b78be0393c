"""nn: modules, layers, losses, initialisation, optimizers and data loading."""

from . import functional, init, modules, optim, parallel, utils
from .activations import (
    ELU,
    SELU,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    Mish,
    PReLU,
    ReLU6,
    SiLU,
    Softplus,
)
from .attention import MultiheadAttention
from .containers import Identity, ModuleDict, ModuleList, ParameterDict, ParameterList
from .conv import Conv1d, Conv2d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .data import DataLoader, Dataset, DistributedSampler, TensorDataset
from .layers import (
    GELU,
    Dropout,
    Dropout1d,
    Dropout2d,
    Embedding,
    Flatten,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
    TripletMarginLoss,
)
from .module import Module, Parameter
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d
from .padding import (
    CircularPad1d,
    CircularPad2d,
    ConstantPad1d,
    ConstantPad2d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReplicationPad1d,
    ReplicationPad2d,
    ZeroPad1d,
    ZeroPad2d,
)
from .pooling import (
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from .resample import (
    PixelShuffle,
    PixelUnshuffle,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d",
    "Dropout2d", "Embedding", "MaxPool2d",
    "AdaptiveMaxPool2d", "AvgPool1d", "ConvTranspose1d", "ConvTranspose2d", "Dropout1d",
    "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "MaxPool1d", "PixelShuffle",
    "PixelUnshuffle", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
    "GELU", "CrossEntropyLoss", "DataLoader", "Dataset", "DistributedSampler", "Dropout",
    "Flatten", "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "Module", "NLLLoss",
    "Parameter", "ReLU", "Sequential", "Sigmoid", "Softmax", "Tanh", "TensorDataset",
    "functional", "init", "modules", "optim", "parallel", "utils",
    "Identity", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList",
    "BCELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss",
    "GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase",
    "MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer",
    "ELU", "SELU", "Hardswish", "Hardtanh", "LogSigmoid", "Mish", "PReLU", "ReLU6", "SiLU",
    "Softplus", "CosineEmbeddingLoss", "HuberLoss", "KLDivLoss", "MarginRankingLoss",
    "TripletMarginLoss",
    "CircularPad1d", "CircularPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d",
    "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "ZeroPad1d", "ZeroPad2d",
]
