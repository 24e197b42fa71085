// What specsim's two matmul kernels share (`small_matmul.cc`, `grouped_matmul.cc`): the
// register block, int8 weights loaded as fp32 vectors, the split of y's columns over the
// pool, and the FFI binding of a matmul over int8-stored weights.
#pragma once

#include "kernel_common.h"

constexpr int kBlock = 16;   // columns per register block: two 8-float vectors
constexpr int kMaxRows = 6;  // rows per register block
constexpr int kLine = 64;    // bytes per cache line

// 16 consecutive int8 weights as two 8-float vectors.
typedef signed char c8 __attribute__((vector_size(8), aligned(1)));
static inline void load16(const int8_t* p, v8& lo, v8& hi) {
#if defined(__AVX2__)   // sign-extend 8 bytes to 8 int32 lanes, convert: 2 instructions per 8
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  lo = (v8)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  hi = (v8)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
#else                   // GCC converts element by element here: correct, compute-bound
  lo = __builtin_convertvector(*reinterpret_cast<const c8*>(p), v8);
  hi = __builtin_convertvector(*reinterpret_cast<const c8*>(p + 8), v8);
#endif
}

// The N columns of y split over the pool in whole register blocks, at least 8 blocks a
// part; the last part also takes the columns past the last whole block. body(c0, c1) runs
// once a part, for its columns [c0, c1).
template <typename F>
static void run_column_parts(ffi::ThreadPool& pool, int64_t N, F&& body) {
  int64_t blocks = N / kBlock;
  int parts = n_parts(pool, blocks, 8);
  run_parts(pool, parts, [=](int p) {
    int64_t b0 = blocks * p / parts, b1 = blocks * (p + 1) / parts;
    int64_t c0 = b0 * kBlock, c1 = p == parts - 1 ? N : b1 * kBlock;
    if (c1 > c0) body(c0, c1);
  });
}

// The operands of a matmul over int8-stored weights: the pool; x [M, K] f32, q s8,
// scales f32, the layer index s32; y [M, N] f32 (a kernel adds its attributes).
static inline auto quantized_matmul_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::S8>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::S32>>()
      .Ret<ffi::Buffer<ffi::F32>>();
}
