"""What every notebook does first: pandas display options, and whether to run small
(``SPECSIM_QUICK=1``, as the headless test run sets)."""

from __future__ import annotations

import pandas as pd

from specsim import environment


def setup() -> bool:
    """Set the notebooks' pandas display options; return True in quick mode."""
    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.precision", 4)
    return environment.is_on("SPECSIM_QUICK")
