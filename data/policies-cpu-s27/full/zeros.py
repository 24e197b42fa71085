"""What materialising a zero draft-model cache costs per call: two f32[24, 8, 1024, 3,
64] (K and V of the layer-skip draft at batch 8, 1024 slots; 151 MB each), 5 calls.

    PYTHONPATH=. python data/policies-cpu-s27/full/zeros.py
"""
import time, jax, jax.numpy as jnp
f = jax.jit(lambda: (jnp.zeros((24, 8, 1024, 3, 64)), jnp.zeros((24, 8, 1024, 3, 64))))
jax.block_until_ready(f())
ts = []
for _ in range(5):
    t0 = time.perf_counter(); out = f(); jax.block_until_ready(out); ts.append(time.perf_counter() - t0); del out
print("two zero draft caches (2 x 151 MB):", [round(t, 3) for t in ts], "s")
