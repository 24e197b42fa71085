"""What the demo runs: `DemoSettings`, a frozen keyword-only dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from specsim import validation
from specsim.errors import InvalidArgument
from specsim.workloads import KINDS

DRAFTER_KINDS = ("ngram", "layer-skip")
DEFAULT_HARDWARE = ("a100-80gb", "h100-sxm", "h200", "tpu-v5e")
DEFAULT_PARTS = ("roofline", "fidelity", "hardware")


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
        if not self.ks:
            raise InvalidArgument("ks must be a non-empty tuple of integers >= 1 (got ())")
        for k in self.ks:
            validation.positive_int("ks", k)
        for name in self.drafters:
            validation.choice("drafters", name, DRAFTER_KINDS)
        if not self.kinds:
            raise InvalidArgument(f"kinds must be a non-empty subset of {KINDS} (got ())")
        for kind in self.kinds:
            validation.choice("kinds", kind, KINDS)
        if not self.temperatures:
            raise InvalidArgument("temperatures must be finite numbers >= 0 (got ())")
        for t in self.temperatures:
            validation.nonnegative_float("temperatures", t)
        for name in ("max_new_tokens", "repeats", "sweep_repeats"):
            validation.positive_int(name, getattr(self, name))
        from specsim.experiment.parts import check_parts
        check_parts(self.parts)

    @classmethod
    def quick_settings(cls, **changes) -> "DemoSettings":
        """A smaller run (fewer K, kinds and tokens) that keeps every step."""
        base = dict(ks=(2, 4), kinds=("code", "prose"), max_new_tokens=40, repeats=2,
                    sweep_repeats=5, quick=True)
        base.update(changes)
        return cls(**base)
