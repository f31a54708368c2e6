"""Privacy toolbox: clipping, noise and accounting.

Import the modules themselves (``from fedjax_dp.privacy import ledger``): the package
re-exports nothing, so ``import fedjax_dp.privacy`` stays light.
"""

from typing import List

__all__: List[str] = []
