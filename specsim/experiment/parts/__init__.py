"""The registry of the demo's parts, in the order they run.

To add a part: write ``parts/<name>.py`` defining ``PART = Part(...)`` (see
`specsim.experiment.part.Part`) and add it to ``PARTS`` below and its name to `specsim.experiment.settings.PART_NAMES`."""

from __future__ import annotations

from specsim.experiment.part import Part
from specsim.experiment.settings import PART_NAMES, check_parts
from specsim.experiment.parts import (batch, drafters, fidelity, hardware, instrument, policies,
                                     roofline, trees)

PARTS: dict[str, Part] = {p.name: p for p in (
    roofline.PART,
    instrument.PART,
    fidelity.PART,
    batch.PART,
    hardware.PART,
    drafters.PART,
    policies.PART,
    trees.PART,
)}
if tuple(PARTS) != PART_NAMES:       # one list of names, checked where both are known
    raise ImportError(f"the parts registry {tuple(PARTS)} differs from "
                      f"settings.PART_NAMES {PART_NAMES}")

__all__ = ["PARTS", "check_parts", "resolve"]


def resolve(names) -> list[Part]:
    """The parts ``names`` asks for plus every part they require, in registry order."""
    wanted: set[str] = set()

    def add(name: str) -> None:
        if name not in wanted:
            wanted.add(name)
            for dep in PARTS[name].requires:
                add(dep)

    for name in check_parts(names):
        add(name)
    return [p for n, p in PARTS.items() if n in wanted]
