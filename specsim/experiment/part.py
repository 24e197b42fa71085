"""A named part of the demo: what it needs, what it adds, and the function that runs it.

Adding a part is one module under `specsim.experiment.parts` that defines ``PART`` and
one entry in that package's ``PARTS`` registry. A part reads what the parts it
``requires`` left in the `DemoState` (tables, fits) and adds the tables it ``produces``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specsim.experiment.state import DemoState


@dataclass(frozen=True, kw_only=True)
class Part:
    """``name``: what a user passes to ``specsim demo --parts``; ``summary``: one line
    for the help and the log; ``requires``: parts that must run first (added
    automatically); ``produces``: table names (`specsim.schema`) it adds to
    ``state.tables``; ``run(state)``: does the work."""
    name: str
    summary: str
    run: Callable[[DemoState], None]
    requires: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
