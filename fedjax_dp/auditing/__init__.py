"""Canary audits of whole algorithms through their real rounds (`canary`), the crafted
clients and populations they use (`worlds`), and the registry of audit targets and
deliberate breaks that ``fedjax-dp audit`` runs (`targets`)."""

from fedjax_dp.auditing.canary import (AuditReport, Setup, describe, ledger_claim,
                                       max_provable, params_change, run, upload_observer)
from fedjax_dp.auditing.worlds import (gaussian_sum_mechanism, population,
                                       stored_update_client)

__all__ = ["AuditReport", "Setup", "describe", "ledger_claim", "max_provable", "run",
           "params_change", "upload_observer",
           "gaussian_sum_mechanism", "population", "stored_update_client"]
