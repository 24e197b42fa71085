// Small-M fp32 matmul for XLA:CPU, called through the XLA FFI (`specsim.models.kernels`):
//   "nn": y[M, N] = x[M, K] @ w[l][K, N]       (every layer matrix, w [L, K, N])
//   "nt": y[M, N] = x[M, K] @ w[l][N, K]^T     (the tied head: the embedding as it lies)
// for the few rows of a decode step or a verify pass (M = batch x new tokens).
//
// Why: on XLA:CPU a one-row dot is a matrix-vector emitter on one core, a dot of 2+ rows goes
// to a GEMM library that reads small-M weights at a fraction of the memory bandwidth, and
// under lax.scan each layer's weights are first copied out of the stacked array. Decoding
// reads every weight once per step, so all three cost memory time. Here every weight byte
// is read once for all M rows, from the stacked array in place (the layer index is an
// operand), with the columns split over XLA's intra-op thread pool.
//
// Row m's result is the same whatever M is (each row keeps its own accumulators and sums
// over k in one fixed order), so a verify pass and a decode step agree bit for bit.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#if defined(__FMA__)
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
// fuses nothing by itself: which products it fused would otherwise depend on the template's
// row count, and a row's result on how many rows came with it.
static inline v8 fma8(v8 a, v8 b, v8 c) {
#if defined(__FMA__)
  return (v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

constexpr int kBlock = 16;   // columns per register block: two 8-float vectors
constexpr int kMaxRows = 6;  // rows per register block: 2 x 6 accumulators

// y[0:R, c:c+16] (+)= x[0:R, k0:k1] @ w[k0:k1, c:c+16]
template <int R>
static inline void block_nn(const float* x, int64_t K, const float* w, int64_t N,
                            int64_t c, int64_t k0, int64_t k1, float* y, bool first) {
  v8 a0[R], a1[R];
  for (int m = 0; m < R; ++m) {
    if (first) { a0[m] = splat(0.f); a1[m] = splat(0.f); }
    else { a0[m] = load8(y + m * N + c); a1[m] = load8(y + m * N + c + 8); }
  }
  const float* wp = w + k0 * N + c;
  for (int64_t k = k0; k < k1; ++k, wp += N) {
    v8 w0 = load8(wp), w1 = load8(wp + 8);
    for (int m = 0; m < R; ++m) {
      v8 b = splat(x[m * K + k]);
      a0[m] = fma8(b, w0, a0[m]);
      a1[m] = fma8(b, w1, a1[m]);
    }
  }
  for (int m = 0; m < R; ++m) { store8(y + m * N + c, a0[m]); store8(y + m * N + c + 8, a1[m]); }
}

static void rows_nn(int R, const float* x, int64_t K, const float* w, int64_t N, int64_t c,
                    int64_t k0, int64_t k1, float* y, bool first) {
  switch (R) {
    case 1: block_nn<1>(x, K, w, N, c, k0, k1, y, first); break;
    case 2: block_nn<2>(x, K, w, N, c, k0, k1, y, first); break;
    case 3: block_nn<3>(x, K, w, N, c, k0, k1, y, first); break;
    case 4: block_nn<4>(x, K, w, N, c, k0, k1, y, first); break;
    case 5: block_nn<5>(x, K, w, N, c, k0, k1, y, first); break;
    default: block_nn<6>(x, K, w, N, c, k0, k1, y, first); break;
  }
}

// Columns [c0, c1) of y = x @ w, w [K, N] row-major. The rows of w are taken in panels of
// about 32 KB (this part's columns only): a panel is consumed column block by column block
// (16 columns x the panel's rows, the accumulators in registers) while the next panel is
// prefetched in address order, one cache line per line consumed, so the memory sees one
// sequential stream. 32 KB with a prefetch to L1 was the best of 16-192 KB and L1/L2 hints
// on a 2-core AMD EPYC VM (0.82-0.91 of a sum's read bandwidth at 1-5 rows).
static void part_nn(const float* x, int64_t M, int64_t K, const float* w, int64_t N,
                    int64_t c0, int64_t c1, float* y) {
  int64_t cols = c1 - c0;
  int64_t cb_end = c0 + (cols / kBlock) * kBlock;
  int64_t panel = std::max<int64_t>(8, std::min<int64_t>(K, (32 << 10) / (cols * 4)));
  for (int64_t k0 = 0; k0 < K; k0 += panel) {
    int64_t k1 = std::min(K, k0 + panel), k2 = std::min(K, k1 + panel);
    int64_t pr = k1, pc = c0;   // prefetch cursor over the next panel
    int64_t per_block = k2 - k1;
    for (int64_t c = c0; c < cb_end; c += kBlock) {
      for (int64_t m = 0; m < M; m += kMaxRows) {
        int R = (int)std::min<int64_t>(kMaxRows, M - m);
        rows_nn(R, x + m * K, K, w, N, c, k0, k1, y + m * N, k0 == 0);
      }
      for (int64_t i = 0; i < per_block && pr < k2; ++i) {
        __builtin_prefetch(w + pr * N + pc, 0, 3);
        pc += kBlock;
        if (pc >= c1) { pc = c0; ++pr; }
      }
    }
    for (int64_t c = cb_end; c < c1; ++c)        // columns past the last whole block
      for (int64_t m = 0; m < M; ++m) {
        float s = k0 == 0 ? 0.f : y[m * N + c];
        for (int64_t k = k0; k < k1; ++k) s += x[m * K + k] * w[k * N + c];
        y[m * N + c] = s;
      }
  }
}

static inline float hsum(v8 v) {
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// Rows [r0, r1) of w [N, K] (columns of y): y[m, r] = x[m, :] . w[r, :].
template <int R>
static void rows_nt(const float* x, int64_t K, const float* w, int64_t N, int64_t r0, int64_t r1,
                    float* y) {
  int64_t kv = (K / 8) * 8;
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = w + r * K;
    v8 a[R];
    for (int m = 0; m < R; ++m) a[m] = splat(0.f);
    for (int64_t k = 0; k < kv; k += 8) {
      v8 wv = load8(wr + k);
      for (int m = 0; m < R; ++m) a[m] = fma8(load8(x + m * K + k), wv, a[m]);
    }
    for (int m = 0; m < R; ++m) {
      float s = hsum(a[m]);
      for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * wr[k];
      y[m * N + r] = s;
    }
  }
}

static void part_nt(const float* x, int64_t M, int64_t K, const float* w, int64_t N,
                    int64_t r0, int64_t r1, float* y) {
  for (int64_t m = 0; m < M; m += kMaxRows) {
    int R = (int)std::min<int64_t>(kMaxRows, M - m);
    const float* xm = x + m * K;
    float* ym = y + m * N;
    switch (R) {
      case 1: rows_nt<1>(xm, K, w, N, r0, r1, ym); break;
      case 2: rows_nt<2>(xm, K, w, N, r0, r1, ym); break;
      case 3: rows_nt<3>(xm, K, w, N, r0, r1, ym); break;
      case 4: rows_nt<4>(xm, K, w, N, r0, r1, ym); break;
      case 5: rows_nt<5>(xm, K, w, N, r0, r1, ym); break;
      default: rows_nt<6>(xm, K, w, N, r0, r1, ym); break;
    }
  }
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

static int n_parts(ffi::ThreadPool& pool, int64_t units, int64_t min_units) {
  int64_t t = std::max<int64_t>(1, pool.num_threads());
  return (int)std::max<int64_t>(1, std::min<int64_t>(t, units / min_units));
}

// x [M, K]; w [L, K, N] (nn) or [L, N, K] (nt), layer index `layer`; y [M, N].
static ffi::Error SmallMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                              ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::S32> layer,
                              ffi::ResultBuffer<ffi::F32> y, bool transposed) {
  auto xd = x.dimensions(), wd = w.dimensions();
  if (xd.size() != 2 || wd.size() != 3)
    return ffi::Error::InvalidArgument("small_matmul: x must be [M, K] and w [L, K, N]");
  int64_t M = xd[0], K = xd[1], L = wd[0];
  int64_t N = transposed ? wd[1] : wd[2];
  if ((transposed ? wd[2] : wd[1]) != K)
    return ffi::Error::InvalidArgument("small_matmul: contraction sizes differ");
  int64_t l = layer.typed_data()[0];
  l = std::min<int64_t>(std::max<int64_t>(l, 0), L - 1);   // as dynamic_slice clamps
  const float* wl = w.typed_data() + l * K * N;
  const float* xp = x.typed_data();
  float* yp = y->typed_data();
  if (!transposed) {
    int64_t blocks = N / kBlock;
    int parts = n_parts(pool, blocks, 8);
    run_parts(pool, parts, [=](int p) {
      int64_t b0 = blocks * p / parts, b1 = blocks * (p + 1) / parts;
      int64_t c0 = b0 * kBlock, c1 = p == parts - 1 ? N : b1 * kBlock;
      part_nn(xp, M, K, wl, N, c0, c1, yp);
    });
  } else {
    int parts = n_parts(pool, N, 256);
    run_parts(pool, parts, [=](int p) {
      part_nt(xp, M, K, wl, N, N * p / parts, N * (p + 1) / parts, yp);
    });
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsimSmallMatmul, SmallMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("transposed"));
