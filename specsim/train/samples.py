"""On-policy samples for distillation: the target generates from a prompt set and the
top-k of its next-token distribution is kept at every generated position (DistillSpec).

The generation loop is specsim's own small one (not `specsim.decode`), because it must
hand back the target's distributions, which the speculative loop never materialises:
one prefill of the right-padded prompts, then a `lax.scan` of single-token passes, each
row at its own position. Half of the rows (alternating) decode greedily, the others
sample at temperature 1, so the draft sees both regimes it will be verified in.

Shapes: N samples, B batch, P padded prompt, G generated tokens per row, T = P + G,
J teacher top-k, V vocab.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specsim.models.compiler import jit
from specsim.models.transformer import forward, init_cache
from specsim.resources import data_path

__all__ = ["Samples", "PROMPTS_PATH", "load_prompts", "encode_prompts", "generate_samples"]

PROMPTS_PATH = data_path("prompts.jsonl")     # shipped with the package


@dataclass(frozen=True)
class Samples:
    """Target samples and its top-J next-token distributions (host arrays).

    tokens [N, T] int32: prompt (right-padded to P) then G generated tokens;
    prompt_lens [N]; n_valid [N]: generated tokens up to and including EOS;
    teacher_ids [N, G, J] int32 and teacher_logp [N, G, J] fp32: the target's top-J
    log-probabilities (temperature 1) for generated token g of row n, which sits at
    tokens[n, prompt_lens[n] + g] and is predicted at position prompt_lens[n] + g - 1."""
    tokens: np.ndarray
    prompt_lens: np.ndarray
    n_valid: np.ndarray
    teacher_ids: np.ndarray
    teacher_logp: np.ndarray

    @property
    def n_generated(self) -> int:
        return self.teacher_ids.shape[1]

    def generated_tokens(self) -> list[np.ndarray]:
        return [self.tokens[i, p:p + v] for i, (p, v) in
                enumerate(zip(self.prompt_lens, self.n_valid))]

    def save(self, path: Path) -> None:
        np.savez(path, **{k: getattr(self, k) for k in self.__dataclass_fields__})

    @classmethod
    def load(cls, path: Path) -> "Samples":
        with np.load(path) as z:
            return cls(**{k: z[k] for k in cls.__dataclass_fields__})


def load_prompts(path: str | Path | None = None) -> list[dict]:
    """The shipped prompt set (``specsim/data/prompts.jsonl``): dicts with kind, text."""
    path = Path(path) if path is not None else PROMPTS_PATH
    if not path.is_file():
        raise ValueError(f"prompt set {path} not found")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def encode_prompts(prompts, tokenizer=None) -> list[list[int]]:
    """Token-id lists from prompt dicts/strings (chat template when the tokenizer has
    one) or from token-id lists as given."""
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, dict):
            p = p["text"]
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError(f"prompts[{i}] is text but the target has no tokenizer")
            p = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": p}]))
        ids = [int(t) for t in p]
        if not ids:
            raise ValueError(f"prompts[{i}] is empty")
        out.append(ids)
    return out


@jit(static_argnames=("cfg", "n_new", "top_j"))
def _generate(params, prompts, prompt_lens, greedy, key, *, cfg, n_new: int, top_j: int):
    """prompts [B, P], prompt_lens [B], greedy [B] bool → (generated [B, G],
    teacher ids [B, G, J], teacher log-probs [B, G, J])."""
    B, P = prompts.shape
    cache = init_cache(cfg, B, P + n_new)
    logits, cache = forward(params, cfg, prompts, cache)                   # [B, P, V]
    last = jnp.take_along_axis(logits, (prompt_lens - 1)[:, None, None], axis=1)[:, 0]
    cache = cache._replace(length=prompt_lens)

    def pick(logits, key):                                                # [B, V] → ...
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        top_lp, top_id = jax.lax.top_k(logp, top_j)                       # [B, J]
        drawn = jax.random.categorical(key, logp, axis=-1)
        tok = jnp.where(greedy, jnp.argmax(logp, axis=-1), drawn).astype(jnp.int32)
        return tok, top_id.astype(jnp.int32), top_lp

    def step(carry, key):
        cache, logits = carry
        tok, top_id, top_lp = pick(logits, key)
        logits, cache = forward(params, cfg, tok[:, None], cache)         # [B, 1, V]
        return (cache, logits[:, 0]), (tok, top_id, top_lp)

    _, (toks, ids, lps) = jax.lax.scan(step, (cache, last), jax.random.split(key, n_new))
    return toks.T, jnp.swapaxes(ids, 0, 1), jnp.swapaxes(lps, 0, 1)


def generate_samples(target, prompts: list[list[int]], *, n_new: int, batch: int, top_j: int,
                     seed: int, progress=None) -> Samples:
    """Let ``target`` continue every prompt by ``n_new`` tokens (alternate rows greedy /
    temperature 1) and keep its top-``top_j`` distribution at each generated position.
    ``progress(n_rows_done)`` is called after each batch."""
    cfg = target.cfg
    P = max(len(p) for p in prompts)
    P = -(-P // 16) * 16                                                   # one compile
    if P + n_new > cfg.max_seq_len:
        raise ValueError(f"prompts ({P}) + n_new ({n_new}) exceed max_seq_len "
                         f"{cfg.max_seq_len} of {cfg.name}")
    eos = cfg.eos_token_id
    key = jax.random.PRNGKey(seed)
    toks, ids, lps = [], [], []
    for start in range(0, len(prompts), batch):
        rows = prompts[start:start + batch]
        rows = rows + [rows[-1]] * (batch - len(rows))                     # fixed shape
        arr = np.zeros((batch, P), np.int32)
        for b, p in enumerate(rows):
            arr[b, :len(p)] = p
        lens = np.asarray([len(p) for p in rows], np.int32)
        greedy = (np.arange(batch) + start) % 2 == 0
        key, sub = jax.random.split(key)
        g, i, lp = _generate(target.params, jnp.asarray(arr), jnp.asarray(lens),
                             jnp.asarray(greedy), sub, cfg=cfg, n_new=n_new, top_j=top_j)
        n = min(batch, len(prompts) - start)
        toks.append(np.asarray(g)[:n])
        ids.append(np.asarray(i)[:n])
        lps.append(np.asarray(lp)[:n])
        if progress is not None:
            progress(n)
    gen = np.concatenate(toks)                                             # [N, G]
    lens = np.asarray([len(p) for p in prompts], np.int32)
    tokens = np.zeros((len(prompts), P + n_new), np.int32)
    for r, p in enumerate(prompts):
        tokens[r, :len(p)] = p
        tokens[r, len(p):len(p) + n_new] = gen[r]
    if eos is None:
        n_valid = np.full(len(prompts), n_new, np.int32)
    else:
        hit = gen == eos
        n_valid = np.where(hit.any(1), hit.argmax(1) + 1, n_new).astype(np.int32)
    return Samples(tokens, lens, n_valid, np.concatenate(ids), np.concatenate(lps))
