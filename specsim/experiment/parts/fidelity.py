"""Part ``fidelity``, the central check: run and time autoregressive and speculative
generation for every temperature, drafter, K and kind of work, and set each run's
predicted speedup (measured acceptance, fitted and swept costs) beside its measured one."""

from __future__ import annotations

from specsim import schema
from specsim.experiment import prediction, timing
from specsim.experiment.part import Part
from specsim.experiment.runspec import run_specs
from specsim.experiment.state import DemoState


def run(state: DemoState) -> None:
    runs = timing.runs_table(state, run_specs(state.settings, list(state.drafters)))
    state.log("    predicting speedups from measured acceptance and fitted costs ...")
    cost_models = {name: setup.cost_model for name, setup in state.drafters.items()}
    state.tables[schema.RUNS] = prediction.add_predictions(
        runs, state.target, cost_models, state.tables[schema.SWEEPS], state.fits)


PART = Part(name="fidelity", summary="running autoregressive and speculative generation, "
            "predicted against measured speedup", run=run, requires=("roofline",),
            produces=(schema.RUNS,))
