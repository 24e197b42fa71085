"""Training Medusa heads (`specsim.drafters.medusa`) with the target frozen.

    result = train_medusa(target, "medusa.npz", MedusaConfig(heads=4, minutes=15))

The data are the feature head's (`specsim.train.feature_head`): the target's own
samples from the shipped prompt set, its top-k next-token distributions, and its
final-normed features ĥ. Head k learns, from ĥ_t alone, the target's distribution of
the token k + 1 positions later (the target's own head gives the next one):

    loss = Σ_k CE(p_target(· | ≤ t+k), softmax(u_k(ĥ_t) · Eₕᵀ))

renormalised over the head vocabulary (the most frequent tokens of the samples). Held
out: each head's top-1 agreement with the target's greedy choice on the greedy rows.

Interruptible and resumable like the other kinds: samples, features and the optimiser
state live in ``<out>.partial/`` (`specsim.train.loop.run_budgeted`); the heads file is
written atomically. Shapes: M examples, K heads, D model, Vh head vocabulary, Jt the
teacher's top-k.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.medusa import init_medusa, medusa_logits, save_medusa
from specsim.train.feature_head import (initial_state, save_head, start_head_training,
                                        teacher_cross_entropy, validate_head_training)
from specsim.train.loop import _optimizer, checkpoint_dir, settings_identity

__all__ = ["MedusaConfig", "MedusaResult", "train_medusa", "head_agreement",
           "default_medusa_path", "find_medusa_heads", "checkpoint_dir"]


@dataclass(frozen=True, kw_only=True)
class MedusaConfig:
    """Settings of one Medusa training (all that decides its result)."""
    heads: int = 4                   # K: tokens guessed ahead of the target's own head
    head_vocab: int = 8192           # FR-Spec head: most frequent tokens of the samples
    steps: int = 1000
    batch: int = 256                 # examples (generated positions) per step
    lr: float = 2e-3
    warmup: int = 50
    holdout: int = 30                # samples kept out for the agreement
    n_new: int = 96                  # generated tokens per prompt
    gen_batch: int = 16
    teacher_top_k: int = 8
    n_prompts: int | None = None
    seed: int = 0
    minutes: float | None = 15.0
    checkpoint_minutes: float = 3.0

    @property
    def unroll(self) -> int:
        """Later positions each example needs (the shared data reads ``unroll``)."""
        return self.heads

    def validate(self, vocab_size: int) -> None:
        validate_head_training(self, vocab_size, ("heads",))

    def identity(self) -> dict:
        return settings_identity(self)


@dataclass
class MedusaResult:
    path: Path | None                 # the saved heads (None while unfinished)
    step: int
    losses: list[float]
    agreement: list[float]            # held-out greedy top-1 agreement per head
    finished: bool
    meta: dict = field(default_factory=dict)


def _loss(params, head, z0, teacher_head, teacher_logp):
    """Σ_k cross-entropy of head k against the target's top-Jt distribution at t+k
    (renormalised over the tokens inside the head)."""
    logq = jax.nn.log_softmax(medusa_logits(params, head, z0), -1)             # [M, K, Vh]
    K = logq.shape[1]
    return jnp.sum(teacher_cross_entropy(logq, teacher_head[:, :K], teacher_logp[:, :K]))


def head_agreement(params, head, data) -> list[float]:
    """Held-out top-1 agreement of each head with the target's greedy choice, over the
    greedy rows (even rows of the samples) where that choice is inside the head."""
    idx = np.flatnonzero(data.ex[:, 0] % 2 == 0)
    if not len(idx):
        return []
    z, _, _, teacher_head, _ = data.arrays(idx)
    K = params["w"].shape[0]
    guess = np.asarray(jnp.argmax(medusa_logits(params, head, z), -1))          # [M, K]
    want = np.asarray(teacher_head[:, :K, 0])
    ok = want >= 0
    return [round(float(((guess == want) & ok)[:, k].sum() / max(ok[:, k].sum(), 1)), 4)
            for k in range(K)]


def train_medusa(target, out: str | Path, cfg: MedusaConfig = MedusaConfig(), *,
                 prompts=None, progress: bool = True) -> MedusaResult:
    """Train Medusa heads for ``target`` into the file ``out`` (.npz; see the module
    docstring). ``finished`` is False when the time budget ran out first (the checkpoint
    stays and the next call resumes)."""
    import optax
    from specsim.train.loop import run_budgeted

    t_start = time.monotonic()
    run = start_head_training(target, out, cfg, prompts, progress, "Medusa heads")
    train, head = run.train, run.head                                       # head [Vh, D]
    opt = _optimizer(cfg)
    state = initial_state(run, cfg, init_medusa(target.cfg.d_model, cfg.heads), opt,
                          "medusa heads")

    @jax.jit
    def step(params, opt_state, z0, teacher_head, teacher_logp):
        loss, grads = jax.value_and_grad(_loss)(params, head, z0, teacher_head, teacher_logp)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def step_once(state):
        rng = np.random.default_rng([cfg.seed, state["step"]])              # resumable order
        z0, _, _, teacher_head, teacher_logp = train.arrays(rng.integers(0, len(train.ex),
                                                                         cfg.batch))
        p, o, loss = step(state["trainable"], state["opt_state"], z0, teacher_head,
                          teacher_logp)
        state.update(trainable=p, opt_state=o, step=state["step"] + 1)
        state["losses"].append(float(loss))
        state["top1"].append(float(loss))
        return dict(loss=f"{float(loss):.3f}")

    run_budgeted(state, cfg, run.ckpt, run.bar, t_start, step_once)
    if state["step"] < cfg.steps:
        return MedusaResult(None, state["step"], state["losses"], [], False)
    agreement = head_agreement(state["trainable"], head, run.held)
    meta = save_head(run, cfg, state, prompts, save_medusa, data={},
                     agreement_per_head_heldout_greedy=agreement)
    return MedusaResult(run.out, state["step"], state["losses"], agreement, True, meta)


def default_medusa_path(target_name: str, cfg: MedusaConfig) -> Path:
    """Where the default Medusa heads of ``target_name`` live: under the specsim cache
    root, named by their settings."""
    from specsim.environment import cache_root
    return cache_root() / "drafts" / (f"{target_name}-medusa-K{cfg.heads}-H{cfg.head_vocab}-"
                                      f"S{cfg.steps}-seed{cfg.seed}.npz")


def find_medusa_heads(target_name: str) -> Path | None:
    """The Medusa heads of ``target_name`` the demo uses: the default ones under the cache
    (`default_medusa_path`) when trained, else the ones committed with the package
    (``specsim/data/drafts/<target>-medusa.npz``); None when there are neither."""
    from specsim.resources import data_path
    default = default_medusa_path(target_name, MedusaConfig())
    if default.is_file():
        return default
    committed = data_path("drafts", f"{target_name}-medusa.npz")
    return committed if committed.is_file() else None
