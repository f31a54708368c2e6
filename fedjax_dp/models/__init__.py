"""Models: flax modules wrapped as pure functions (see `fedjax_dp.models.core`).

Your own architecture: `from_module(module, feature_shape, num_classes)` wraps any flax
linen module (logits ``[B, num_classes]``) as a `Model`; ``fedjax-dp run --model
package.module:factory`` builds one with `model_from_factory`. Fine-tuning a trained
model: `pretrained` (all parameters, from given ones) and `fedjax_dp.models.lora.lora`
(low-rank adapters of its dense kernels; `fedjax_dp.models.lora.merge`).
"""

from fedjax_dp.models.core import (Model, count_params, create_model, MODEL_NAMES, as_model,
                                   default_model_name, from_module, model_from_factory)
# ``lora`` (the function) stays in its module, so that ``fedjax_dp.models.lora`` is the
# module: ``from fedjax_dp.models.lora import lora, merge``.
from fedjax_dp.models.lora import LoRAModel, PretrainedModel, pretrained
from fedjax_dp.models.modules import MLP, CNN, HARConv1D, Linear

__all__ = ["Model", "count_params", "create_model", "MODEL_NAMES", "as_model",
           "default_model_name", "from_module", "model_from_factory",
           "LoRAModel", "PretrainedModel", "pretrained",
           "MLP", "CNN", "HARConv1D", "Linear"]
