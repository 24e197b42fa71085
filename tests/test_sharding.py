"""Sharded generation on 8 simulated CPU devices equals single-device generation token for
token; the arrays are sharded as the specs claim; bad meshes are clear errors.

The device count of XLA's CPU backend is fixed when JAX starts, so the 8-device checks
run in one subprocess (XLA_FLAGS=--xla_force_host_platform_device_count=8) that prints a
JSON report; the tests read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest
from jax.sharding import PartitionSpec as P

from specsim import sharding
from specsim.models import load
from specsim.models.transformer import unfuse_projections

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import json
    import jax, numpy as np
    from specsim import decode, models, sharding
    from specsim.drafters import NGramDrafter, layer_skip_drafter, model_drafter
    from specsim.models.transformer import _forward_jit, init_cache

    out = {"n_devices": jax.device_count()}
    target = models.load("tiny-llama", seed=0)
    small = models.load("tiny-llama", seed=1)
    mesh = sharding.make_mesh(data=4, model=2)
    prompts = [[5, 6, 7, 5, 6, 7, 5], [9, 10, 11, 12], [3, 4, 3, 4, 3, 4, 3, 4, 3], [20]]
    kw = dict(eos_token_id=None)
    ref = decode.generate_autoregressive(target, prompts, 16, **kw).tokens
    out["ar"] = [ref, decode.generate_autoregressive(target, prompts, 16, mesh=mesh, **kw).tokens]
    drafters = {"ngram": NGramDrafter(target.cfg.vocab_size),
                "layer_skip": layer_skip_drafter(target, [0]),
                "small_model": model_drafter(small, target)}
    for name, d in drafters.items():
        one = decode.generate_speculative(target, d, prompts, 16, k=3, **kw)
        many = decode.generate_speculative(target, d, prompts, 16, k=3, mesh=mesh, **kw)
        out["spec_" + name] = [one.tokens, many.tokens,
                               one.stats.accepted.tolist(), many.stats.accepted.tolist()]
    out["ar_ref"] = ref

    # biases sharded by head (qwen2 layout), tied head
    qwen = models.load("tiny-qwen2", seed=2)
    out["qwen"] = [decode.generate_autoregressive(qwen, prompts, 8, **kw).tokens,
                   decode.generate_autoregressive(qwen, prompts, 8, mesh=mesh, **kw).tokens]

    # what the placed arrays claim
    sh = sharding.shard_model(target, mesh)
    lay = sh.params["layers"]
    def desc(x):      # spec padded to the rank (XLA may drop trailing Nones), shard, whole
        spec = list(x.sharding.spec) + [None] * (x.ndim - len(x.sharding.spec))
        return [spec, list(x.addressable_shards[0].data.shape), list(x.shape)]
    out["specs"] = {n: desc(lay[n]) for n in ("wq", "wk", "wv", "wo", "w_gate", "w_up",
                                               "w_down", "attn_norm_scale")}
    out["specs"]["embed"] = desc(sh.params["embed"])
    out["specs"]["lm_head"] = desc(sh.params["lm_head"])
    cache = sharding.shard_cache(init_cache(target.cfg, 4, 32), mesh)
    toks = sharding.shard_batch(np.asarray([p[:1] for p in prompts], np.int32), mesh)
    logits, cache2 = _forward_jit(sh.params, target.cfg, toks, cache)
    out["cache_in"] = desc(cache.k)
    out["cache_out"] = desc(cache2.k)
    out["cache_len_out"] = list(cache2.length.sharding.spec)
    ref_logits, _ = _forward_jit(target.params, target.cfg, np.asarray(toks),
                                 init_cache(target.cfg, 4, 32))
    out["logits_maxdiff"] = float(np.max(np.abs(np.asarray(logits) - np.asarray(ref_logits))))

    # bad meshes
    errors = {}
    for name, call in [
            ("model4", lambda: sharding.shard_model(target, sharding.make_mesh(data=1, model=4))),
            ("data3", lambda: decode.generate_autoregressive(
                target, prompts, 4, mesh=sharding.make_mesh(data=3, model=2))),
            ("too_many", lambda: sharding.make_mesh(data=4, model=4))]:
        try:
            call()
            errors[name] = None
        except ValueError as err:
            errors[name] = str(err)
    out["errors"] = errors
    print("JSON" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def report():
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JSON"))
    return json.loads(line[4:])


def test_eight_devices(report):
    assert report["n_devices"] == 8


def test_sharded_autoregressive_equals_single_device(report):
    one, many = report["ar"]
    assert one == many
    assert all(len(t) == 16 for t in one)


@pytest.mark.parametrize("drafter", ["ngram", "layer_skip", "small_model"])
def test_sharded_speculative_equals_single_device(report, drafter):
    one, many, acc_one, acc_many = report["spec_" + drafter]
    assert one == many
    assert acc_one == acc_many                     # the same drafts accepted, iteration by iteration
    assert one == report["ar_ref"]                 # and greedy speculative == greedy target


def test_sharded_biases_and_tied_head(report):
    one, many = report["qwen"]
    assert one == many


def test_weights_are_sharded_as_claimed(report):
    s = report["specs"]
    # tiny-llama: L=3, D=48, H*E=60, G*E=20, F=72; model axis 2 halves the sharded dim
    assert s["wq"] == [[None, None, "model"], [3, 48, 30], [3, 48, 60]]
    assert s["wk"] == [[None, None, "model"], [3, 48, 10], [3, 48, 20]]
    assert s["wv"][1] == [3, 48, 10]
    assert s["wo"] == [[None, "model", None], [3, 30, 48], [3, 60, 48]]
    assert s["w_gate"][1] == s["w_up"][1] == [3, 48, 36]
    assert s["w_down"] == [[None, "model", None], [3, 36, 48], [3, 72, 48]]
    assert s["attn_norm_scale"][0] == [None, None]
    assert s["embed"] == [[None, None], [97, 48], [97, 48]]
    assert s["lm_head"] == [[None, None], [48, 97], [48, 97]]


def test_cache_sharded_by_batch_and_kv_head(report):
    # [L, B, S, G, E] = [3, 4, 32, 2, 10]: batch over data (4), kv heads over model (2)
    want = [[None, "data", None, "model", None], [3, 1, 32, 1, 10],
            [3, 4, 32, 2, 10]]
    assert report["cache_in"] == want
    assert report["cache_out"] == want            # a sharded forward keeps the layout
    assert report["cache_len_out"] == ["data"]
    assert report["logits_maxdiff"] < 1e-5


def test_bad_meshes_are_clear_errors(report):
    e = report["errors"]
    assert "'model' (size 4)" in e["model4"] and "n_heads" in e["model4"] and "(6)" in e["model4"]
    assert "'data' (size 3)" in e["data3"] and "batch (4" in e["data3"]
    assert "needs 16 devices" in e["too_many"] and "8 are available" in e["too_many"]


# ---- in-process checks (no extra devices needed) ------------------------------------------
def test_param_specs_for_per_layer_layout():
    model = load("tiny-llama").with_layer_loop("unroll")          # tuple of per-layer dicts
    specs = sharding.param_specs(unfuse_projections(model.params, model.cfg))
    assert isinstance(specs["layers"], tuple) and len(specs["layers"]) == 3
    lay = specs["layers"][1]
    assert lay["wq"] == P(None, "model") and lay["wo"] == P("model", None)
    assert lay["w_down"] == P("model", None) and lay["mlp_norm_scale"] == P()
    vocab = sharding.param_specs(unfuse_projections(model.params, model.cfg), vocab=True)
    assert vocab["embed"] == P("model", None) and vocab["lm_head"] == P(None, "model")


def test_gpt2_specs_cover_its_mlp_and_biases():
    gpt2 = load("tiny-gpt2")
    specs = sharding.param_specs(unfuse_projections(gpt2.params, gpt2.cfg))["layers"]
    assert specs["w_fc"] == P(None, None, "model") and specs["b_fc"] == P(None, "model")
    assert specs["w_proj"] == P(None, "model", None)
    assert specs["bq"] == P(None, "model") and specs["bo"] == P()


def test_single_device_mesh_runs_and_mesh_axes_are_checked():
    mesh = sharding.make_mesh()
    assert sharding.axis_sizes(mesh) == (1, 1)
    with pytest.raises(ValueError, match="mesh axis 'model' must be a positive integer"):
        sharding.make_mesh(model=0)
    other = jax.sharding.Mesh(mesh.devices, ("x", "y"))
    with pytest.raises(ValueError, match="mesh axes must be"):
        sharding.axis_sizes(other)


@pytest.mark.parametrize("call", ["autoregressive", "speculative"])
def test_a_device_name_for_the_mesh_is_a_clear_error(call):
    from specsim import decode
    from specsim.drafters import NGramDrafter
    from specsim.errors import InvalidArgument
    target = load("tiny-llama")
    drafter = NGramDrafter(target.cfg.vocab_size)
    run = {"autoregressive": lambda: decode.generate_autoregressive(
               target, [[1, 2, 3]], 4, mesh="gpu"),
           "speculative": lambda: decode.generate_speculative(
               target, drafter, [[1, 2, 3]], 4, k=2, mesh="gpu")}[call]
    with pytest.raises(InvalidArgument, match=r"mesh must be a jax\.sharding\.Mesh "
                                              r".*make_mesh.*got 'gpu' \(str\)"):
        run()
