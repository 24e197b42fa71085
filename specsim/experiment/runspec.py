"""One timed generation run, as a typed spec instead of a positional tuple."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specsim import schema, validation
from specsim.errors import InvalidArgument
from specsim.experiment.settings import DemoSettings

AUTOREGRESSIVE = schema.AUTOREGRESSIVE
BASELINE_REPEATS = 3
"""The baseline is timed this many times per round: it is cheap, and one baseline serves
every speculative run at its temperature, so its noise counts most."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What one timed run does: ``drafter`` is a run name of
    `specsim.experiment.drafters.build_drafters` or ``"autoregressive"`` (then ``k`` is
    0); ``kind`` a kind of work of `specsim.workloads`; ``batch`` rows of the same prompt."""
    temperature: float
    drafter: str
    k: int
    kind: str
    batch: int = 1

    def __post_init__(self):
        if (self.drafter == AUTOREGRESSIVE) != (self.k == 0):
            raise InvalidArgument(f"k must be 0 exactly for the autoregressive baseline, got "
                             f"drafter {self.drafter!r} with k={self.k}")
        validation.nonnegative_int("k", self.k)
        validation.positive_int("batch", self.batch)
        validation.nonnegative_float("temperature", self.temperature)

    @property
    def is_baseline(self) -> bool:
        return self.drafter == AUTOREGRESSIVE

    @property
    def program(self) -> "RunSpec":
        """The spec every kind of work shares a compiled program with (same shapes)."""
        return dataclasses.replace(self, kind="")

    def as_row(self) -> dict:
        return {schema.TEMPERATURE: self.temperature, schema.DRAFTER: self.drafter,
                schema.K: self.k, schema.KIND: self.kind, schema.BATCH: self.batch}


def run_specs(settings: DemoSettings, drafter_names) -> list[RunSpec]:
    """Every run of the fidelity part: per temperature the baseline and each (drafter,
    K), on every kind of work, at batch 1."""
    specs = []
    for temp in settings.temperatures:
        for kind in settings.kinds:
            specs.append(RunSpec(temperature=temp, drafter=AUTOREGRESSIVE, k=0, kind=kind))
        for name in drafter_names:
            for k in settings.ks:
                specs += [RunSpec(temperature=temp, drafter=name, k=k, kind=kind)
                          for kind in settings.kinds]
    return specs


def timing_jobs(specs: list[RunSpec]) -> list[RunSpec]:
    """The calls of one timing round: every spec once, baselines `BASELINE_REPEATS` times."""
    return list(specs) + [s for s in specs if s.is_baseline] * (BASELINE_REPEATS - 1)


def programs(specs: list[RunSpec]) -> list[RunSpec]:
    """The distinct compiled programs among ``specs`` (first spec of each, in order)."""
    seen: dict[RunSpec, RunSpec] = {}
    for s in specs:
        seen.setdefault(s.program, s)
    return list(seen.values())
