"""PyTorch's ``torch.onnx``: present so that scripts importing it run; exporting a model
is not supported."""


def export(model, args=None, f=None, *rest, **options):
    """Refused: there is no ONNX exporter here."""
    raise NotImplementedError("torch.onnx.export: minitorch_exp cannot export ONNX models; "
                              "save the weights with mt.save(model.state_dict(), path) "
                              "and export from PyTorch")
