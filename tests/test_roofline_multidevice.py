"""Multi-device roofline: tensor-parallel all-reduce bytes and time, the per-device cost
of a sharded pass, and the interconnect columns of specsim/data/hardware.csv, against hand
computations."""

from __future__ import annotations

import math

import pytest

from specsim import roofline
from specsim.models.config import ModelConfig

# L=2, D=32, H=8, G=4, E=4 (Q=32, K=16), F=64, V=100, fp32 (4 bytes)
CFG = ModelConfig(name="mesh-test", vocab_size=100, d_model=32, n_layers=2, n_heads=8,
                  n_kv_heads=4, head_dim=4, d_ff=64, tie_embeddings=True)


def test_allreduce_bytes_by_hand():
    # 2 layers x 2 all-reduces x ring factor 2*(4-1)/4 x B*T*D*4 bytes = 4*1.5*1536
    assert roofline.allreduce_bytes(CFG, batch=4, n_tokens=3, model=4) == 9216.0
    assert roofline.allreduce_bytes(CFG, batch=4, n_tokens=3, model=1) == 0.0
    # bf16 halves it; 2 devices: ring factor 1
    assert roofline.allreduce_bytes(CFG, 4, 3, 2, dtype="bf16") == 2 * 2 * 1.0 * 384 * 2


def test_allreduce_time_uses_one_direction_of_the_link_and_latency():
    hw = roofline.load_hardware("h100-sxm")                  # NVLink 900 GB/s both ways
    t = roofline.allreduce_time(hw, CFG, 4, 3, 4, latency=2e-6)
    assert t == pytest.approx(9216 / 450e9 + 2 * 2 * 2e-6, rel=1e-12)
    assert roofline.allreduce_time(600e9, CFG, 4, 3, 4) == pytest.approx(9216 / 300e9)
    assert roofline.allreduce_time(hw, CFG, 4, 3, 1, latency=1.0) == 0.0
    with pytest.raises(ValueError, match="no interconnect bandwidth"):
        roofline.allreduce_time(roofline.load_hardware("tpu-v4"), CFG, 4, 3, 4)
    with pytest.raises(ValueError, match="latency"):
        roofline.allreduce_time(hw, CFG, 4, 3, 4, latency=-1)


def test_sharded_cost_per_device_by_hand():
    # data=2, model=4: each device holds 2 rows (N = 2*3 = 6 tokens), 2 heads, 1 kv head,
    # 16 MLP columns; embedding/head and norms whole.
    cost = roofline.sharded_cost(CFG, batch=4, n_tokens=3, context=16, model=4, data=2)
    b, f = dict(cost.bytes_by), dict(cost.flops_by)
    D, V, L, N, p = 32, 100, 2, 6, 4
    layer = D * (32 + 2 * 16) // p + 32 * D // p + 3 * D * 64 // p + 2 * D
    assert b["weights"] == (L * layer + D * V + N * D + D) * 4
    assert b["kv_read"] == 2 * L * 2 * 1 * 4 * 4 * 16          # 2 (k,v) L B G E w S
    assert b["kv_write"] == 2 * L * 2 * 1 * 4 * 4 * 3
    assert b["logits"] == 4 * N * V                             # the head is replicated
    assert f["qkv"] == L * 2 * N * D * (32 + 32) / p
    assert f["mlp"] == L * 2 * N * D * 64 * 3 / p
    assert f["head"] == 2 * N * D * V
    assert f["attention"] == L * 4 * 2 * (8 // p) * 3 * 16 * 4
    assert cost.batch == 2


def test_one_device_is_the_plain_roofline():
    hw = roofline.load_hardware("a100-80gb")
    one = roofline.sharded_cost(CFG, 4, 3, 16)
    plain = roofline.forward_cost(CFG, 4, 3, 16)
    assert one == plain
    assert roofline.predict_time_sharded(hw, CFG, 4, 3, 16, overhead=1e-5) == \
        roofline.predict_time(hw, plain, 1e-5)


def test_predict_time_sharded_adds_the_allreduce():
    hw = roofline.load_hardware("h200")
    cost = roofline.sharded_cost(CFG, 4, 3, 16, "bf16", model=4)
    want = roofline.predict_time(hw, cost, 7e-6) + 9216 / 2 / 450e9 + 4 * 1e-6
    got = roofline.predict_time_sharded(hw, CFG, 4, 3, 16, "bf16", model=4, overhead=7e-6,
                                        latency=1e-6)
    assert got == pytest.approx(want, rel=1e-12)


def test_device_scaling_rows():
    hw = roofline.load_hardware("h100-sxm")
    rows = roofline.device_scaling(hw, CFG, 4, 1, 64, "bf16", devices=(1, 2, 3, 4, 8))
    assert [r["devices"] for r in rows] == [1, 2, 4]          # 3 and 8 do not divide G=4
    assert rows[0]["speedup"] == 1.0 and rows[0]["allreduce_time"] == 0.0
    for r in rows:
        t = roofline.predict_time_sharded(hw, CFG, 4, 1, 64, "bf16", model=r["devices"])
        assert r["time"] == pytest.approx(t) and r["speedup"] == pytest.approx(rows[0]["time"] / t)


def test_bad_mesh_sizes_are_clear_errors():
    with pytest.raises(ValueError, match=r"model \(3 devices\) must divide n_heads \(8\)"):
        roofline.sharded_cost(CFG, 4, 1, 8, model=3)
    with pytest.raises(ValueError, match=r"data \(3 devices\) must divide the batch \(4\)"):
        roofline.sharded_cost(CFG, 4, 1, 8, data=3)


def test_interconnect_columns_with_sources():
    want = {"a100-40gb": 600, "a100-80gb": 600, "h100-sxm": 900, "h200": 900, "l4": 64,
            "rtx-4090": 64, "tpu-v5e": 400, "tpu-v5p": 1200, "tpu-v6e": 800}
    for name, gbps in want.items():
        hw = roofline.load_hardware(name)
        assert hw.interconnect_bandwidth == gbps * 1e9, name
    assert math.isnan(roofline.load_hardware("tpu-v4").interconnect_bandwidth)
    assert roofline.load_hardware("h100-sxm").interconnect == "nvlink4"
    rows = roofline._read_rows()
    for r in rows:
        assert bool(r["interconnect_GBps"]) == r["interconnect_source"].startswith("https://"), r["name"]
    table = roofline.hardware_table()
    assert table.set_index("name").loc["tpu-v5p", "interconnect_GBps"] == 1200
