"""The registry of the demo's parts, in the order they run.

To add a part: write ``parts/<name>.py`` defining ``PART = Part(...)`` (see
`specsim.experiment.part.Part`) and add it to ``PARTS`` below."""

from __future__ import annotations

from specsim.errors import InvalidArgument
from specsim.experiment.part import Part
from specsim.experiment.parts import (batch, drafters, fidelity, hardware, instrument, policies,
                                     roofline)

PARTS: dict[str, Part] = {p.name: p for p in (
    roofline.PART,
    instrument.PART,
    fidelity.PART,
    batch.PART,
    hardware.PART,
    drafters.PART,
    policies.PART,
)}


def check_parts(names) -> tuple[str, ...]:
    """``names`` as a tuple, or a ValueError naming the unknown ones and the choices."""
    names = tuple(names)
    bad = [n for n in names if n not in PARTS]
    if bad or not names:
        raise InvalidArgument(f"parts must be a non-empty selection of {tuple(PARTS)}, got {names!r}")
    return names


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
