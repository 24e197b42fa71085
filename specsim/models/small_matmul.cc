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
#include <string>

#include "matmul_common.h"

// 16 consecutive weights as two 8-float vectors: fp32 as they are (int8: matmul_common.h).
static inline void load16(const float* p, v8& lo, v8& hi) { lo = load8(p); hi = load8(p + 8); }

// y[0:R, c:c+16] (+)= x[0:R, k0:k1] @ w[k0:k1, c:c+16]; on the last panel (scale given)
// each column is then multiplied by its scale (int8 per output channel).
template <int R, typename W>
static inline void block_nn(const float* x, int64_t K, const W* w, int64_t N, int64_t c,
                            int64_t k0, int64_t k1, float* y, bool first, const float* scale) {
  v8 a0[R], a1[R];
  for (int m = 0; m < R; ++m) {
    if (first) { a0[m] = splat(0.f); a1[m] = splat(0.f); }
    else { a0[m] = load8(y + m * N + c); a1[m] = load8(y + m * N + c + 8); }
  }
  const W* wp = w + k0 * N + c;
  for (int64_t k = k0; k < k1; ++k, wp += N) {
    v8 w0, w1;
    load16(wp, w0, w1);
    for (int m = 0; m < R; ++m) {
      v8 b = splat(x[m * K + k]);
      a0[m] = fma8(b, w0, a0[m]);
      a1[m] = fma8(b, w1, a1[m]);
    }
  }
  if (scale) {
    v8 s0 = load8(scale + c), s1 = load8(scale + c + 8);
    for (int m = 0; m < R; ++m) { a0[m] *= s0; a1[m] *= s1; }
  }
  for (int m = 0; m < R; ++m) { store8(y + m * N + c, a0[m]); store8(y + m * N + c + 8, a1[m]); }
}

template <typename W>
static void rows_nn(int R, const float* x, int64_t K, const W* w, int64_t N, int64_t c,
                    int64_t k0, int64_t k1, float* y, bool first, const float* scale) {
  switch (R) {
    case 1: block_nn<1>(x, K, w, N, c, k0, k1, y, first, scale); break;
    case 2: block_nn<2>(x, K, w, N, c, k0, k1, y, first, scale); break;
    case 3: block_nn<3>(x, K, w, N, c, k0, k1, y, first, scale); break;
    case 4: block_nn<4>(x, K, w, N, c, k0, k1, y, first, scale); break;
    case 5: block_nn<5>(x, K, w, N, c, k0, k1, y, first, scale); break;
    default: block_nn<6>(x, K, w, N, c, k0, k1, y, first, scale); break;
  }
}

// Columns [c0, c1) of y = x @ w, w [K, N] row-major (fp32, or int8 with a scale per
// column). The rows of w are taken in panels of about 32 KB (this part's columns only): a
// panel is consumed column block by column block (16 columns x the panel's rows, the
// accumulators in registers) while the next panel is prefetched in address order, as many
// cache lines per block as the block consumed, so the memory sees one sequential stream.
// 32 KB with a prefetch to L1 was the best of 16-192 KB and L1/L2 hints on a 2-core AMD
// EPYC VM (fp32: 0.82-0.91 of a sum's read bandwidth at 1-5 rows).
template <typename W>
static void part_nn(const float* x, int64_t M, int64_t K, const W* w, int64_t N,
                    int64_t c0, int64_t c1, float* y, const float* scale) {
  const int64_t elem = sizeof(W);
  int64_t cols = c1 - c0;
  int64_t cb_end = c0 + (cols / kBlock) * kBlock;
  int64_t panel = std::max<int64_t>(8, std::min<int64_t>(K, (32 << 10) / (cols * elem)));
  const char* base = reinterpret_cast<const char*>(w);
  for (int64_t k0 = 0; k0 < K; k0 += panel) {
    int64_t k1 = std::min(K, k0 + panel), k2 = std::min(K, k1 + panel);
    bool first = k0 == 0;
    const float* sc = k1 == K ? scale : nullptr;
    int64_t pr = k1, pb = 0;    // prefetch cursor over the next panel: row, byte in its segment
    int64_t per_block = ((k2 - k1) * kBlock * elem + kLine - 1) / kLine;
    for (int64_t c = c0; c < cb_end; c += kBlock) {
      for (int64_t m = 0; m < M; m += kMaxRows) {
        int R = (int)std::min<int64_t>(kMaxRows, M - m);
        rows_nn(R, x + m * K, K, w, N, c, k0, k1, y + m * N, first, sc);
      }
      for (int64_t i = 0; i < per_block && pr < k2; ++i) {
        __builtin_prefetch(base + (pr * N + c0) * elem + pb, 0, 3);
        pb += kLine;
        if (pb >= cols * elem) { pb = 0; ++pr; }
      }
    }
    for (int64_t c = cb_end; c < c1; ++c)        // columns past the last whole block
      for (int64_t m = 0; m < M; ++m) {
        float s = first ? 0.f : y[m * N + c];
        for (int64_t k = k0; k < k1; ++k) s += x[m * K + k] * (float)w[k * N + c];
        y[m * N + c] = sc ? s * sc[c] : s;
      }
  }
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

static ffi::Error check_shapes(const char* what, int64_t xr, int64_t wr, int64_t K, int64_t wk) {
  if (xr != 2 || wr != 3)
    return ffi::Error::InvalidArgument(std::string(what) + ": x must be [M, K] and w [L, K, N]");
  if (wk != K) return ffi::Error::InvalidArgument(std::string(what) + ": contraction sizes differ");
  return ffi::Error::Success();
}

template <typename W>
static void run_nn(ffi::ThreadPool& pool, const float* xp, int64_t M, int64_t K, const W* wl,
                   int64_t N, float* yp, const float* scale) {
  run_column_parts(pool, N, [=](int64_t c0, int64_t c1) {
    part_nn(xp, M, K, wl, N, c0, c1, yp, scale);
  });
}

// x [M, K]; w [L, K, N] (nn) or [L, N, K] (nt), layer index `layer`; y [M, N].
static ffi::Error SmallMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                              ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::S32> layer,
                              ffi::ResultBuffer<ffi::F32> y, bool transposed) {
  auto xd = x.dimensions(), wd = w.dimensions();
  int64_t K = xd.size() == 2 ? xd[1] : 0;
  int64_t N = wd.size() == 3 ? (transposed ? wd[1] : wd[2]) : 0;
  ffi::Error err = check_shapes("small_matmul", xd.size(), wd.size(), K,
                                wd.size() == 3 ? (transposed ? wd[2] : wd[1]) : -1);
  if (err.failure()) return err;
  int64_t M = xd[0];
  int64_t l = clamp_layer(layer.typed_data()[0], wd[0]);
  const float* wl = w.typed_data() + l * K * N;
  const float* xp = x.typed_data();
  float* yp = y->typed_data();
  if (!transposed) {
    run_nn(pool, xp, M, K, wl, N, yp, nullptr);
  } else {
    int parts = n_parts(pool, N, 256);
    run_parts(pool, parts, [=](int p) {
      part_nt(xp, M, K, wl, N, N * p / parts, N * (p + 1) / parts, yp);
    });
  }
  return ffi::Error::Success();
}

// int8 weights with one scale per output column: x [M, K]; q [L, K, N] int8;
// scales [L, 1, N] fp32; y [M, N] = (x @ q[l]) * scales[l].
static ffi::Error SmallMatmulInt8(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                                  ffi::Buffer<ffi::S8> q, ffi::Buffer<ffi::F32> scales,
                                  ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y) {
  auto xd = x.dimensions(), qd = q.dimensions(), sd = scales.dimensions();
  int64_t K = xd.size() == 2 ? xd[1] : 0;
  ffi::Error err = check_shapes("small_matmul_int8", xd.size(), qd.size(), K,
                                qd.size() == 3 ? qd[1] : -1);
  if (err.failure()) return err;
  int64_t M = xd[0], L = qd[0], N = qd[2];
  if (sd.size() != 3 || sd[0] != L || sd[1] != 1 || sd[2] != N)
    return ffi::Error::InvalidArgument("small_matmul_int8: scales must be [L, 1, N]");
  int64_t l = clamp_layer(layer.typed_data()[0], L);
  run_nn(pool, x.typed_data(), M, K, q.typed_data() + l * K * N, N, y->typed_data(),
         scales.typed_data() + l * N);
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsimSmallMatmulInt8, SmallMatmulInt8,
                              quantized_matmul_binding());
