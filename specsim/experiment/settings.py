"""What the demo runs: `DemoSettings`, a frozen keyword-only dataclass."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specsim.workloads import KINDS

DRAFTER_KINDS = ("ngram", "layer-skip")
DEFAULT_HARDWARE = ("a100-80gb", "h100-sxm", "h200", "tpu-v5e")
DEFAULT_PARTS = ("roofline", "fidelity", "hardware")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """What the demo runs. ``layer_skip``: the layer ids the self-draft keeps (default:
    all but the middle fifth — dropping more makes α collapse on an untrained model).
    ``parts``: the named parts of the demo to run (`specsim.experiment.parts.PARTS`);
    the parts they need are added in order."""
    target: str = "smollm2-135m"
    draft: str | None = None
    drafters: tuple[str, ...] = DRAFTER_KINDS
    layer_skip: tuple[int, ...] | None = None
    ngram_n: int = 3
    ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    kinds: tuple[str, ...] = KINDS
    max_new_tokens: int = 48
    repeats: int = 2
    sweep_repeats: int = 7
    hardware: tuple[str, ...] = DEFAULT_HARDWARE
    hardware_dtype: str = "bfloat16"
    # lax.scan compiles each speculative program 2-3x faster than the unrolled loop and
    # runs the whole generation within 5-12% of it on this CPU (see the README).
    layer_loop: str | None = "scan"
    parts: tuple[str, ...] = DEFAULT_PARTS
    seed: int = 0
    out_dir: str = "results/demo"
    quick: bool = False

    def __post_init__(self):
        if not self.ks or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                              for v in self.ks):
            raise ValueError(f"ks must be a non-empty tuple of integers >= 1, got {self.ks!r}")
        bad = [d for d in self.drafters if d not in DRAFTER_KINDS]
        if bad:
            raise ValueError(f"drafters must be among {DRAFTER_KINDS}, got {bad}")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {self.kinds!r}")
        if not self.temperatures or any(not (t >= 0 and math.isfinite(t))
                                        for t in self.temperatures):
            raise ValueError(f"temperatures must be finite numbers >= 0, got {self.temperatures!r}")
        for name in ("max_new_tokens", "repeats", "sweep_repeats"):
            _positive_int(name, getattr(self, name))
        from specsim.experiment.parts import check_parts
        check_parts(self.parts)

    @classmethod
    def quick_settings(cls, **changes) -> "DemoSettings":
        """A smaller run (fewer K, kinds and tokens) that keeps every step."""
        base = dict(ks=(2, 4), kinds=("code", "prose"), max_new_tokens=40, repeats=2,
                    sweep_repeats=5, quick=True)
        base.update(changes)
        return cls(**base)
