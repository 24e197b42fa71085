"""The drafters a demo runs, each with the model its draft step costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.experiment.settings import DemoSettings


@dataclass(frozen=True)
class DraftSetup:
    """A drafter under its run name, and the `specsim.models.Model` whose prefill the
    drafter pays (None when it has none: n-gram lookup, the feature head)."""
    name: str
    drafter: Any
    cost_model: Any = None


def default_layer_skip(n_layers: int) -> tuple[int, ...]:
    """All layers but a block of the middle fifth (at least one layer dropped)."""
    drop = max(1, n_layers // 5)
    start = (n_layers - drop) // 2
    return tuple(i for i in range(n_layers) if not start <= i < start + drop)


def build_drafters(target, settings: DemoSettings, draft_model=None) -> dict[str, DraftSetup]:
    """Run name -> `DraftSetup` for every drafter ``settings.drafters`` names (the
    feature head only when one is found for the target, see
    `drafter_study.find_feature_head`), plus a small-model drafter when ``draft_model``
    is given."""
    from specsim import drafters as dr
    from specsim.models import Model

    out: dict[str, DraftSetup] = {}
    for kind in settings.drafters:
        if kind == "ngram":
            name = f"ngram-{settings.ngram_n}"
            out[name] = DraftSetup(name, dr.NGramDrafter(target.cfg.vocab_size,
                                                         n=settings.ngram_n))
        elif kind == "layer-skip":
            layers = settings.layer_skip or default_layer_skip(target.cfg.n_layers)
            d = dr.layer_skip_drafter(target, layers)
            # the drafter's own gathered layers, as a Model for sweeping its cost
            out[d.name] = DraftSetup(d.name, d, Model(d.cfg, d.params, None,
                                                      f"layer-skip of {target.source}"))
        elif kind == "feature-head":       # when one is trained or committed for this target
            from specsim.experiment.drafter_study import find_feature_head
            path = find_feature_head(target.cfg.name)
            if path is not None:
                d = dr.feature_head_drafter(target, path)
                out[d.name] = DraftSetup(d.name, d)       # no prefill of its own
    if draft_model is not None:
        d = dr.model_drafter(draft_model, target)
        out[d.name] = DraftSetup(d.name, d, draft_model)
    return out
