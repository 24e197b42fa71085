// What specsim's XLA:CPU kernels share (`small_matmul.cc`, `cache_attention.cc`): 8-float
// vectors, and work split over XLA's intra-op thread pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>

#if defined(__FMA__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

static inline v8 load8(const float* p) { return *reinterpret_cast<const v8u*>(p); }
static inline void store8(float* p, v8 v) { *reinterpret_cast<v8u*>(p) = v; }
static inline v8 splat(float s) { return (v8){s, s, s, s, s, s, s, s}; }

// a * b + c, fused where the CPU has FMA. Built with -ffp-contract=off so that the compiler
// fuses nothing by itself: which products it fused would otherwise depend on a template's
// row count, and a row's result on how many rows came with it.
static inline v8 fma8(v8 a, v8 b, v8 c) {
#if defined(__FMA__)
  return (v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

static inline float hsum(v8 v) {
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// Work split into parts over the pool; each part is claimed once, by a pool task or by
// the caller, so the call never waits on a task the pool has not started.
struct Split {
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  int parts;
};

template <typename F>
static void run_parts(ffi::ThreadPool& pool, int parts, F&& body) {
  if (parts <= 1) { body(0); return; }
  auto split = std::make_shared<Split>();
  split->parts = parts;
  auto work = [split, body]() {
    for (int p; (p = split->next.fetch_add(1)) < split->parts;) {
      body(p);
      split->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int i = 1; i < parts; ++i) { auto task = work; pool.Schedule(std::move(task)); }
  work();
  while (split->done.load(std::memory_order_acquire) < parts) std::this_thread::yield();
}

// Threads per call: XLA's intra-op pool, capped by $SPECSIM_KERNEL_THREADS when set (read
// once per process; 1: the calling thread alone).
static int64_t thread_cap() {
  static const int64_t cap = [] {
    const char* v = std::getenv("SPECSIM_KERNEL_THREADS");
    return v && std::atoll(v) > 0 ? (int64_t)std::atoll(v) : (int64_t)1 << 30;
  }();
  return cap;
}

// Parts for `units` of work, at least `min_units` a part, at most one a thread.
static int n_parts(ffi::ThreadPool& pool, int64_t units, int64_t min_units) {
  int64_t t = std::min(thread_cap(), std::max<int64_t>(1, pool.num_threads()));
  return (int)std::max<int64_t>(1, std::min<int64_t>(t, units / min_units));
}

static int64_t clamp_layer(int64_t l, int64_t L) {   // as dynamic_slice clamps
  return std::min<int64_t>(std::max<int64_t>(l, 0), L - 1);
}
