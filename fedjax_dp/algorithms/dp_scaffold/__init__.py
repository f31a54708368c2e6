"""DP-SCAFFOLD: SCAFFOLD's control variates (Karimireddy et al., ICML 2020) under
user-level DP (joint clipping of the model and control-variate deltas, central Gaussian
noise), composed from engine stages with per-client state.

* `algorithm`: the functional builder `dp_scaffold`, its client and server stages;
* `plugin`: the ``fedjax-dp run`` plug-in (`DpScaffold`);
* `audit`: its canary-audit targets.
"""

from fedjax_dp.algorithms.dp_scaffold.algorithm import (control_correction, dp_scaffold,
                                                         scaffold_client, scaffold_server)

__all__ = ["dp_scaffold", "scaffold_client", "scaffold_server", "control_correction"]
