"""Part ``hardware``: the speedup the measured acceptance would give on datasheet
hardware (roofline of the model's FLOPs and bytes, no launch overhead), beside this
machine's fitted roofline."""

from __future__ import annotations

from specsim import schema
from specsim.experiment import prediction
from specsim.experiment.part import Part
from specsim.experiment.state import DemoState


def run(state: DemoState) -> None:
    s = state.settings
    cost_models = {name: setup.cost_model for name, setup in state.drafters.items()}
    runs = state.tables[schema.RUNS]
    runs = runs[runs[schema.DRAFTER].isin(list(cost_models))]     # the real drafters
    state.tables[schema.HARDWARE] = prediction.hardware_predictions(
        runs, state.target, cost_models, state.fits, s.hardware,
        s.hardware_dtype, state.cache_len)


PART = Part(name="hardware", summary="predicting the same acceptance on datasheet hardware",
            run=run, requires=("roofline", "fidelity"), produces=(schema.HARDWARE,))
