"""Models: flax modules wrapped as pure functions (see `fedjax_dp.models.core`).

Your own architecture: `from_module(module, feature_shape, num_classes)` wraps any flax
linen module (logits ``[B, num_classes]``) as a `Model`; ``fedjax-dp run --model
package.module:factory`` builds one with `model_from_factory`.
"""

from fedjax_dp.models.core import (Model, count_params, create_model, MODEL_NAMES, as_model,
                                   default_model_name, from_module, model_from_factory)
from fedjax_dp.models.modules import MLP, CNN, HARConv1D, Linear

__all__ = ["Model", "count_params", "create_model", "MODEL_NAMES", "as_model",
           "default_model_name", "from_module", "model_from_factory",
           "MLP", "CNN", "HARConv1D", "Linear"]
