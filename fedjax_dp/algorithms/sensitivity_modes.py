"""The two sensitivity modes of the model-upload papers (000 PADPFL, 004 amplitude
varying), shared by both: their options, and the epsilon *conditional* on the paper's
own upload sensitivity, reported beside the guarantee.

* ``"paper"``: the paper's noise calibration as written; the guarantee uses the bound
  the code enforces (the diameter of the parameter/weight ball every upload lies in).
* ``"clipped_gradients"``: local training clips every per-example gradient to
  ``grad_clip_norm`` G, and the paper's formula is calibrated with that provable
  sensitivity (`fedjax_dp.privacy.sensitivity.model_upload_sensitivity`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Literal, Optional

from fedjax_dp.privacy.ledger import PrivacyLedger
from fedjax_dp.privacy.ledger_protocol import PrivacyReport
from fedjax_dp.validation import FedJaxDpError, check_positive


@dataclasses.dataclass
class SensitivityOptions:
  """How a model upload's sensitivity is bounded."""
  sensitivity_mode: Literal["paper", "clipped_gradients"] = "paper"
  """paper: the paper's noise calibration, with the guarantee computed for the bound the
  code enforces (the weight ball); clipped_gradients: per-example gradient clipping
  (--grad-clip-norm) and the paper's formula with that provable sensitivity"""
  grad_clip_norm: Optional[float] = None
  """per-example gradient clip norm G of --sensitivity-mode clipped_gradients"""

  def validate_sensitivity(self) -> None:
    """Raises FedJaxDpError unless the mode and G go together."""
    if self.grad_clip_norm is not None:
      check_positive("grad_clip_norm", self.grad_clip_norm)
    if (self.sensitivity_mode == "clipped_gradients") != (self.grad_clip_norm is not None):
      raise FedJaxDpError("sensitivity_mode='clipped_gradients' and grad_clip_norm go "
                          "together: give both (G, the per-example gradient clip norm) "
                          "or neither.", option="sensitivity_mode")


def conditional_epsilon(alg, records: List[Dict[str, Any]], delta: float
                        ) -> Dict[str, Any]:
  """The accountant's epsilon *if* the paper's sensitivity held (each record's
  ``noise_multiplier_conditional``), beside the provable one, with a note saying which
  is the guarantee. ``alg.config`` holds ``sensitivity``, ``sensitivity_paper`` and
  ``sensitivity_mode``."""
  led = PrivacyLedger(delta, **alg.privacy.ledger_kwargs())
  led.record(PrivacyReport([r["noise_multiplier_conditional"] for r in records],
                           [r["sampling_rate"] for r in records],
                           [r["dp_steps"] for r in records]))
  provable = alg.config["sensitivity_mode"] != "paper"
  return {"epsilon_conditional_rdp": led.epsilon(),
          "epsilon_guarantee_note": (
              "epsilon (epsilon_rdp / epsilon_pld) is the guarantee the code enforces, "
              f"with sensitivity {alg.config['sensitivity']:.4g} ("
              + ("clipped per-example gradients" if provable else
                 "the diameter of the parameter ball every upload lies in")
              + "). epsilon_conditional_rdp is what the accountant gives for the same "
              f"noise IF the paper's sensitivity {alg.config['sensitivity_paper']:.4g} "
              "held, which the code does not enforce (local gradients are "
              + ("clipped, but the paper's bound is still not implied)" if provable else
                 "not clipped); it is not a guarantee."))}
