"""Time the theory side on 10^6-point grids and 10^6 simulated iterations.

    python benchmarks/bench_analytic.py [--repeats 7]

Targets on a 2-core CPU: a 10^6-point (alpha, K, c) grid
through ``speedup`` and ``optimal_k`` in under 50 ms, 10^6 simulated iterations in
under 1 s. Prints the median and min wall time and the median process CPU time of
``--repeats`` runs after one warm-up, with the NumPy version, CPU count, load average
and git commit next to the numbers.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

import numpy as np

from specsim import analytic, simulate

N = 1_000_000


def _time(fn, repeats: int) -> tuple[float, float, float]:
    """(median wall, min wall, median process CPU time) in seconds over ``repeats``.

    On a shared machine the wall time includes waiting for a core; the CPU time of this
    single-threaded process approximates the time on an idle one.
    """
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(wall)), float(np.min(wall)), float(np.median(cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    # Flat 10^6-point grids: every point has its own (alpha, K, c), no broadcasting help.
    alpha = rng.random(N)
    k = rng.integers(1, 65, N)
    c = rng.random(N) * 0.5
    # The same count as an outer-product grid, 100 x 100 x 100, via broadcasting.
    a3 = np.linspace(0.0, 1.0, 100)[:, None, None]
    k3 = np.arange(1, 101)[None, :, None]
    c3 = np.linspace(0.0, 0.5, 100)[None, None, :]
    # optimal_k takes (alpha, c): 1000 x 1000 = 10^6 points.
    a2 = np.repeat(np.linspace(0.0, 1.0, 1000), 1000)
    c2 = np.tile(np.linspace(0.0, 0.5, 1000), 1000)

    cases = [
        ("speedup, 10^6 flat (alpha, K, c) points", lambda: analytic.speedup(alpha, k, c), 0.05),
        ("speedup, 100^3 broadcast grid", lambda: analytic.speedup(a3, k3, c3), 0.05),
        ("expected_tokens, 10^6 flat points", lambda: analytic.expected_tokens(alpha, k), 0.05),
        ("optimal_k, 10^6 (alpha, c), k_max=64", lambda: analytic.optimal_k(a2, c2, 64), 0.05),
        ("optimal_k, 10^6 (alpha, c), k_max=16", lambda: analytic.optimal_k(a2, c2, 16), 0.05),
        ("simulate_iid, 10^6 iterations, K=8", lambda: simulate.simulate_iid(0.8, 8, N, rng=1), 1.0),
        ("simulate_iid, 10^6 iterations, K=32", lambda: simulate.simulate_iid(0.8, 32, N, rng=1), 1.0),
        ("simulate_positional, 10^6 iterations, K=8",
         lambda: simulate.simulate_positional(np.linspace(0.9, 0.6, 8), N, rng=1), 1.0),
        ("simulate_markov, 10^6 iterations, K=8",
         lambda: simulate.simulate_markov(0.8, 0.5, 8, N, rng=1), 1.0),
    ]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    print(f"numpy {np.__version__}, python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, commit {commit}, "
          f"repeats {args.repeats}")
    print(f"{'case':<46} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'target ms':>10}"
          "  verdict (median wall)")
    for name, fn, target in cases:
        med, best, cpu = _time(fn, args.repeats)
        verdict = "ok" if med < target else "OVER"
        print(f"{name:<46} {med * 1e3:>10.1f} {best * 1e3:>8.1f} {cpu * 1e3:>8.1f} "
              f"{target * 1e3:>10.0f}  {verdict}")


if __name__ == "__main__":
    main()
