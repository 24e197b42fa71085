"""What the parts of a demo share while it runs, and what a finished demo returns."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from specsim import schema
from specsim.experiment.drafters import DraftSetup
from specsim.experiment.settings import DemoSettings


@dataclass
class DemoState:
    """The models, prompts and cache size every part runs with, and the tables and fits
    the parts have produced so far (``tables`` keyed by `specsim.schema` table names)."""
    settings: DemoSettings
    target: Any                                   # specsim.models.Model
    drafters: dict[str, DraftSetup]
    prompts: dict[str, list[int]]                 # kind of work -> token ids
    cache_len: int                                # KV slots of every run
    environment: dict
    log: Callable[[str], None] = print
    progress: bool = True
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    fits: dict = field(default_factory=dict)      # model name -> fit.RooflineFit
    started: float = field(default_factory=time.perf_counter)   # the demo's start
    parts_left: list[str] = field(default_factory=list)  # this part and those after it

    def timing_budget(self, part: str, groups_left: int = 1) -> float:
        """Seconds of timed rounds for the next group of in-run ``part`` (of
        ``groups_left`` groups it still has): its share (`settings.TIMING_SHARES`,
        normalised over the in-run parts still to run) of the time left before
        ``settings.time_budget_s``, less `settings.reserve_s` for every later group."""
        from specsim.experiment.settings import TIMING_SHARES

        s = self.settings
        later = [p for p in self.parts_left if p in TIMING_SHARES and p != part]
        later_groups = groups_left - 1 + sum(2 if p == "batch" else 1 for p in later)
        left = s.time_budget_s - (time.perf_counter() - self.started) - s.reserve_s * later_groups
        own = TIMING_SHARES.get(part, 0.0) / max(1, groups_left)
        share = own / (own * groups_left + sum(TIMING_SHARES[p] for p in later))
        return max(0.0, left * share)

    def cost_model(self, drafter: str):
        """The Model one draft step of ``drafter`` costs (None: free)."""
        return None if drafter == schema.AUTOREGRESSIVE else self.drafters[drafter].cost_model


@dataclass
class DemoResult:
    """A finished demo: every table as a DataFrame (empty when its part did not run),
    the roofline fits by model name, and the files the command line wrote."""
    settings: DemoSettings
    environment: dict
    ceilings: pd.DataFrame
    sweeps: pd.DataFrame
    fits: dict                                    # model name -> fit.RooflineFit
    runs: pd.DataFrame
    hardware: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)   # every part's tables
    files: list[str] = field(default_factory=list)

    @classmethod
    def from_state(cls, state: DemoState) -> "DemoResult":
        t = state.tables
        return cls(state.settings, state.environment,
                   t.get(schema.CEILINGS, pd.DataFrame()), t.get(schema.SWEEPS, pd.DataFrame()),
                   dict(state.fits), t.get(schema.RUNS, pd.DataFrame()),
                   t.get(schema.HARDWARE, pd.DataFrame()), dict(t))

    def mape(self, column: str = schema.PRED_IID) -> float:
        """Mean absolute percentage error of prediction ``column`` over the speculative runs."""
        from specsim.experiment.prediction import mape
        return mape(self.runs, column)
