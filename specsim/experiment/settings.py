"""What the demo runs: `DemoSettings`, a frozen keyword-only dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from specsim import validation
from specsim.errors import InvalidArgument
from specsim.workloads import KINDS

PART_NAMES = ("roofline", "instrument", "fidelity", "batch", "hardware", "drafters", "policies",
              "trees")
"""The demo's parts in the order they run; `specsim.experiment.parts.PARTS` registers one
module under each name (kept here so that settings can check ``parts`` without importing
the parts, which import the settings)."""

DRAFTER_KINDS = ("ngram", "layer-skip", "feature-head")
DEFAULT_HARDWARE = ("a100-80gb", "h100-sxm", "h200", "tpu-v5e")
DEFAULT_PARTS = ("roofline", "fidelity", "hardware")
DEMO_PARTS = ("roofline", "instrument", "fidelity", "batch")
"""What ``specsim demo`` runs by default (`DemoSettings.demo`): the roofline sweep and fit
the prediction before the run reads, and the central check, every run predicted before
it (fitted roofline, the drafter's α) and from its own rounds (in-run pass times)."""
TIMING_SHARES = {"instrument": 0.4, "fidelity": 0.3, "batch": 0.3}
"""How the in-run parts that run share the time left for timed rounds (normalised over
the parts that run; a part splits its share evenly over its groups, and what a group
leaves unused goes to the groups after it): about in proportion to what a round of each
costs on the default grid (four blocks of three runs at batch 1; two blocks of three
real drafters, the layer-skip self-draft the slowest; one block at batch 4 and one at
16, see `inrun.blocks`)."""


def check_parts(names) -> tuple[str, ...]:
    """``names`` as a tuple, or an InvalidArgument naming the unknown ones and the choices."""
    names = tuple(names)
    bad = [n for n in names if n not in PART_NAMES]
    if bad or not names:
        raise InvalidArgument(f"parts must be a non-empty selection of {PART_NAMES}, "
                              f"got {names!r}")
    return names


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
    # paired rounds (`specsim.experiment.paired`): `repeats` rounds whatever the budget
    # (two: the least that gives an interval, a wide one), then more for the runs whose
    # measured speedup's 95% interval is wider than ±target_half_width, up to max_rounds,
    # while the part's share of the time budget lasts
    repeats: int = 2
    max_rounds: int = 12
    target_half_width: float = 0.03
    runs_per_baseline: int = 3       # runs sharing one baseline and passes (`inrun.blocks`)
    pass_sets: int = 1               # times a block's pass programs run a round, half
                                     # before its loops, the rest after (`inrun.blocks`)
    bootstrap_draws: int = 1000
    # wall seconds from the start of the demo by which its timed rounds end (compile,
    # sweep and calibration included; the report and figures take seconds more); each
    # group of an in-run part gets its share (TIMING_SHARES) of what is left, less
    # `reserve_s` for every group still to compile
    time_budget_s: float = 540.0
    reserve_s: float = 20.0
    # the report warns that the machine was too busy for the stated precision when more
    # than this share of runs did not converge, or the matmul ceiling moved by more than
    # busy_drift between the start and the end of the demo
    busy_unconverged_share: float = 0.1
    busy_drift: float = 0.15
    # real drafters' per-position α before the run: untimed calibration runs on this many
    # other prompts of the same kind of work (the shipped prompt set)
    calibration_prompts: int = 2
    sweep_repeats: int = 7
    hardware: tuple[str, ...] = DEFAULT_HARDWARE
    hardware_dtype: str = "bfloat16"
    # lax.scan compiles each speculative program faster than the unrolled loop and, with
    # specsim's CPU kernel, runs as fast (docs/studies/layer-loop.md); every model's default
    layer_loop: str | None = "scan"
    parts: tuple[str, ...] = DEFAULT_PARTS
    seed: int = 0
    out_dir: str = "results/demo"
    quick: bool = False
    # ---- the in-run cost model (parts instrument, batch, fidelity) -------------------
    clock: str = "wall"
    pass_steps: int = 4
    # ---- the policies part ----------------------------------------------------------
    # each cell's plain-decoding baseline is timed this many times a round: one noisy
    # sample of a number every row of the cell reads moves all of them
    shared_repeats: int = 1
    # runs of each loop program (and pass call) a round, from one prefill, the fastest
    # kept (`bench.interleaved_rounds`' inner): the least of a few runs is the cost with
    # the least interference from other processes
    loop_repeats: int = 2
    # new tokens per run of the policies part (0: max_new_tokens): a policy that learns
    # within a run needs room to (docs/studies/policy-run-length.md)
    policy_max_new_tokens: int = 0
    prompt_tokens: int = 28
    # real drafters' prompts (part fidelity) are cut to this many tokens (0: whole):
    # enough context for n-gram lookup, and a padded prompt of 128 keeps the cache at 256
    # slots (the full prompts, up to 162 tokens, pad to 256 and a 512-slot cache: twice
    # the prefill and attention per step)
    drafter_prompt_tokens: int = 120
    instrument_alphas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    instrument_ks: tuple[int, ...] = (1, 2, 4, 8)
    instrument_costs: tuple[float, ...] = (0.0, 0.25)
    batches: tuple[int, ...] = (1, 4, 16)
    batch_alphas: tuple[float, ...] = (0.7, 0.9)
    batch_ks: tuple[int, ...] = (2, 4)
    # new tokens per row of the batch part's groups at batch > 1 (0: max_new_tokens). A
    # batched run ends when its slowest row does, so its iteration count is a maximum over
    # rows, a noisy draw whose spread falls as 1/sqrt(tokens)
    batch_max_new_tokens: int = 0

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
        for name in ("max_new_tokens", "repeats", "sweep_repeats", "pass_steps",
                     "shared_repeats", "loop_repeats", "max_rounds", "bootstrap_draws",
                     "calibration_prompts", "runs_per_baseline", "pass_sets"):
            validation.positive_int(name, getattr(self, name))
        if self.max_rounds < self.repeats:
            raise InvalidArgument(f"max_rounds must be >= repeats (the least rounds, "
                                  f"{self.repeats}), got {self.max_rounds}")
        for name in ("target_half_width", "busy_unconverged_share", "busy_drift"):
            v = getattr(self, name)
            if not 0 < v < 1:
                raise InvalidArgument(f"{name} must be a fraction in (0, 1), got {v!r}")
        for name in ("time_budget_s", "reserve_s"):
            validation.nonnegative_float(name, getattr(self, name))
        self._check_inrun()
        check_parts(self.parts)

    def _check_inrun(self) -> None:
        validation.choice("clock", self.clock, ("wall", "cpu"))
        validation.nonnegative_int("prompt_tokens", self.prompt_tokens)
        validation.nonnegative_int("drafter_prompt_tokens", self.drafter_prompt_tokens)
        validation.nonnegative_int("batch_max_new_tokens", self.batch_max_new_tokens)
        n = validation.nonnegative_int("policy_max_new_tokens", self.policy_max_new_tokens)
        if n == 1 or (n == 0 and "policies" in self.parts and self.max_new_tokens < 2):
            raise InvalidArgument(f"the policies part decodes after the prefill's token, so "
                                  f"policy_max_new_tokens must be 0 (max_new_tokens, then at "
                                  f"least 2) or an integer >= 2 (got {n}, max_new_tokens "
                                  f"{self.max_new_tokens})")
        for name in ("instrument_alphas", "batch_alphas"):
            for a in getattr(self, name):
                if not 0.0 <= float(a) <= 1.0:
                    raise InvalidArgument(f"{name} must hold numbers in [0, 1], got {a!r}")
        for name in ("instrument_ks", "batch_ks", "batches"):
            if not getattr(self, name):
                raise InvalidArgument(f"{name} must be a non-empty tuple of integers >= 1")
            for v in getattr(self, name):
                validation.positive_int(name, v)
        for c in self.instrument_costs:
            if not 0.0 <= float(c) <= 1.0:
                raise InvalidArgument(f"instrument_costs must hold fractions of the target's "
                                      f"layers in [0, 1] (a negative cost is meaningless), "
                                      f"got {c!r}")

    @classmethod
    def demo(cls, *, quick: bool = False, **changes) -> "DemoSettings":
        """What ``specsim demo`` runs (``quick``: ``--quick``), sized for the budget of a
        2-core CPU (full ≤ 10 min, quick ≤ 3 min, compiles included): the instrument over
        α {0.5, 0.7, 0.9} × K {2, 4} × cost {none, a quarter of the layers} (12 runs),
        the real drafters at K 4 (temperature 0) on the two kinds of work where n-gram
        lookup finds most, prompts cut to 64 tokens so they share the instrument's
        128-slot programs (6 runs), and α 0.9, K 4 at batch 4 and 16 (batch 1 is the
        instrument's); 40 new tokens per run, 48 per row at batch 4 and 16, 80 in the
        policies part (``--parts policies``, not a default part; `policy_max_new_tokens`,
        which follows ``max_new_tokens`` where a caller sets that alone). ``quick``:
        the instrument over α {0.5, 0.9} × K {2, 4} at no draft cost, the n-gram drafter
        at K 4 on two kinds, α 0.9 K 4 at batch 4 (7 runs).

        Timing: paired rounds of blocks (`inrun.blocks`: up to three runs of one set of
        rows and one K with the baseline and passes they share, each call's loop program
        timed alone, the passes the prediction reads eight times a round (quick: four),
        half before the loops and half after), three rounds whatever the budget (two degrees of freedom: the
        least that gives a usable interval), then more, up to eight, for every block
        whose runs' speedups are not yet known to ±3%, the widest first when the budget
        runs short: the timed rounds end by 540 s from the start (quick: 150 s),
        compiles, sweeps and calibration included, so a slow or busy machine gets fewer
        rounds (and says so) rather than a longer demo.

        Clock: process CPU time by default, which time-slicing by other processes does
        not inflate; every call is timed by both clocks at once, so the wall-clock
        speedup stays in every row (``measured_speedup_wall``)."""
        base = dict(parts=DEMO_PARTS, ks=(4,), temperatures=(0.0,), repeats=3, max_rounds=8,
                    clock="cpu", pass_sets=8,
                    shared_repeats=3, sweep_repeats=5,
                    kinds=("code", "extraction"), max_new_tokens=40, batch_max_new_tokens=48,
                    drafter_prompt_tokens=64, instrument_alphas=(0.5, 0.7, 0.9),
                    instrument_ks=(2, 4), batch_alphas=(0.9,), batch_ks=(4,),
                    # the policies part's runs: 80 tokens, or max_new_tokens where the
                    # caller sets that and not this
                    policy_max_new_tokens=0 if "max_new_tokens" in changes else 80)
        if quick:
            # n-gram prompts of 64 tokens keep the instrument's 128-slot cache, so the
            # n-gram runs reuse its compiled pass programs (P 128 and S 256 would compile
            # six more programs), and still give lookup context: α per slot 0.64 on
            # extraction, 0.15 on code at K 4 (0.01-0.02 with the instrument's 28 tokens)
            base.update(drafter_prompt_tokens=64)
            base.update(ks=(4,), drafters=("ngram",), quick=True, instrument_costs=(0.0,),
                        shared_repeats=2, time_budget_s=150.0, pass_sets=4,
                        reserve_s=10.0, calibration_prompts=1,
                        batch_max_new_tokens=0, policy_max_new_tokens=0,
                        sweep_repeats=5, instrument_alphas=(0.5, 0.9), instrument_ks=(2, 4),
                        batches=(1, 4), batch_alphas=(0.9,), batch_ks=(4,))
        base.update(changes)
        return cls(**base)

    @classmethod
    def quick_settings(cls, **changes) -> "DemoSettings":
        """A smaller run (fewer K, kinds and tokens) that keeps every step."""
        base = dict(ks=(2, 4), kinds=("code", "prose"), max_new_tokens=40, repeats=2,
                    sweep_repeats=5, quick=True)
        base.update(changes)
        return cls(**base)
