"""Distilling a draft from the target (DistillSpec-style on-policy distillation, an
FR-Spec restricted head), in JAX with optax.

    from specsim import models, train, drafters
    target = models.load("smollm2-135m")
    result = train.train_draft(target, "drafts/d4", train.DistillConfig(layers=4))
    drafter = drafters.distilled_drafter(result.folder, target)

Modules: `samples` (the target's on-policy samples and top-k distributions), `draft`
(the draft's parameters, head vocabulary and loss), `loop` (the optax loop, checkpoints,
resume), `save` (the Hugging Face folder + metadata, acceptance measurement).
"""

from specsim.train.draft import head_vocabulary, layer_ids
from specsim.train.loop import (METADATA_FILE, DistillConfig, TrainResult, checkpoint_dir,
                                train_draft)
from specsim.train.samples import Samples, generate_samples, load_prompts
from specsim.train.save import (alpha_per_slot, default_draft_path, evaluate_alpha,
                                measure_alpha)

__all__ = ["DistillConfig", "TrainResult", "train_draft", "checkpoint_dir", "METADATA_FILE",
           "head_vocabulary", "layer_ids", "Samples", "generate_samples", "load_prompts",
           "measure_alpha", "alpha_per_slot", "evaluate_alpha", "default_draft_path"]
