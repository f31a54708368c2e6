"""Models: flax modules wrapped as pure functions (see `fedjax_dp.models.core`)."""

from fedjax_dp.models.core import Model, count_params, create_model, MODEL_NAMES
from fedjax_dp.models.modules import MLP, CNN, HARConv1D, Linear

__all__ = ["Model", "count_params", "create_model", "MODEL_NAMES",
           "MLP", "CNN", "HARConv1D", "Linear"]
