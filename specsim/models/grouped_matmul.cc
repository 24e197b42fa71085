// Small-M matmul over weight-only quantised weights in groups, for XLA:CPU, called through
// the XLA FFI (`specsim.models.kernels.small_matmul_quantized`):
//   y[M, N] = x[M, K] @ ŵ[l],   ŵ[k, n] = q[l][k, n] * scales[l][k / g, n] (+ offsets[l][k / g, n])
// in the layout of `specsim.models.quantize`: bits 8: q int8 [L, K, N]; bits 4: q packed two
// values per byte along K, [L, K/2, N] (row 2i in the low nibble of byte row i, row 2i+1 in
// the high nibble, two's complement); scales fp32 [L, K/g, N], g = K / (K/g) (even for 4 bits);
// offsets (asymmetric formats only) fp32 like scales.
//
// Why: a decode step reads every weight once, so a 4-bit weight read as 4 bits costs an
// eighth of its fp32 bytes. Each 16-column block of a byte row is loaded once for all M rows
// and unpacked and converted to fp32 in registers; each row sums a group's products in
// registers and multiplies the sum by the group's scales, y = Σ_g (x_g @ q_g) * scale_g (as
// `specsim.models.quantize.quantized_matmul` does with XLA's dots), so the scales cost one
// multiply-add per group, not one multiply per weight; offsets one more, Σ_g (Σ x_g) * offset_g,
// with each row's group sums of x formed once per call. A row's sums run in one fixed order
// whatever M, the threads or the panels (panels hold whole groups; the columns past the last
// whole block of 16 are always the same), so a verify pass agrees with a decode step bit
// for bit. Panels of about 32 KB and the prefetch follow small_matmul.cc's part_nn.
//
// With int8 activations (a format choice, `QuantizedWeight.activations`) each row of x is
// rounded to int8 per group once per call and a group's products are summed in integers:
// by AVX512-VNNI (vpdpbusd, 64 weights an instruction) where the CPU has it, else by a
// portable loop with the same integer sums and the same fp32 epilogue, so both give the
// same bits (docs/studies/int4.md for what it saves).
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "matmul_common.h"

namespace {

// 16 packed bytes: the low nibbles (row 2i: e0, e1 for columns 0-7, 8-15) and the high
// nibbles (row 2i+1: o0, o1), sign-extended and converted.
inline void load16_int4(const int8_t* p, v8& e0, v8& e1, v8& o0, v8& o1) {
#if defined(__AVX2__)
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i a = _mm256_cvtepi8_epi32(b), c = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
  e0 = (v8)_mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(a, 28), 28));
  e1 = (v8)_mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(c, 28), 28));
  o0 = (v8)_mm256_cvtepi32_ps(_mm256_srai_epi32(a, 4));
  o1 = (v8)_mm256_cvtepi32_ps(_mm256_srai_epi32(c, 4));
#else
  for (int i = 0; i < 8; ++i) {
    e0[i] = (float)((int8_t)(p[i] << 4) >> 4);
    e1[i] = (float)((int8_t)(p[i + 8] << 4) >> 4);
    o0[i] = (float)(p[i] >> 4);
    o1[i] = (float)(p[i + 8] >> 4);
  }
#endif
}

// One weight, for the columns past the last whole block.
template <int BITS>
inline float value(const int8_t* q, int64_t N, int64_t k, int64_t c) {
  if (BITS == 8) return (float)q[k * N + c];
  int8_t b = q[(k / 2) * N + c];
  return (float)((k & 1) ? (b >> 4) : ((int8_t)(b << 4) >> 4));
}

// y[0:R, c:c+16] (+)= Σ over the groups in rows [k0, k1) (whole groups) of
// (x[0:R, group] @ q[group, c:c+16]) * scales[group, c:c+16]. In a group, the even and the
// odd rows are summed apart (two chains of multiply-adds, so that one row does not wait on
// the latency of one chain), added, and multiplied into the sum with the group's scales.
template <int R, int BITS, bool OFFS>
inline void block(const float* x, int64_t K, const int8_t* q, const float* s, const float* off,
                  const float* xs, int64_t N, int64_t g, int64_t c, int64_t k0, int64_t k1,
                  float* y, bool first) {
  v8 a0[R], a1[R];
  for (int m = 0; m < R; ++m) {
    if (first) { a0[m] = splat(0.f); a1[m] = splat(0.f); }
    else { a0[m] = load8(y + m * N + c); a1[m] = load8(y + m * N + c + 8); }
  }
  const int64_t G = K / g;
  const float* sp = s + (k0 / g) * N + c;
  const float* op = OFFS ? off + (k0 / g) * N + c : nullptr;
  for (int64_t k = k0; k < k1; k += g, sp += N) {
    v8 e0[R], e1[R], o0[R], o1[R];
    for (int m = 0; m < R; ++m) e0[m] = e1[m] = o0[m] = o1[m] = splat(0.f);
    if (BITS == 8) {
      const int8_t* qp = q + k * N + c;
      int64_t j = 0;
      for (; j + 1 < g; j += 2, qp += 2 * N) {
        v8 w0, w1, w2, w3;
        load16(qp, w0, w1);
        load16(qp + N, w2, w3);
        for (int m = 0; m < R; ++m) {
          v8 b = splat(x[m * K + k + j]), d = splat(x[m * K + k + j + 1]);
          e0[m] = fma8(b, w0, e0[m]); e1[m] = fma8(b, w1, e1[m]);
          o0[m] = fma8(d, w2, o0[m]); o1[m] = fma8(d, w3, o1[m]);
        }
      }
      if (j < g) {                                  // an odd group size: its last row
        v8 w0, w1;
        load16(qp, w0, w1);
        for (int m = 0; m < R; ++m) {
          v8 b = splat(x[m * K + k + j]);
          e0[m] = fma8(b, w0, e0[m]); e1[m] = fma8(b, w1, e1[m]);
        }
      }
    } else {
      const int8_t* qp = q + (k / 2) * N + c;
      for (int64_t j = 0; j < g; j += 2, qp += N) {
        v8 w0, w1, w2, w3;
        load16_int4(qp, w0, w1, w2, w3);
        for (int m = 0; m < R; ++m) {
          v8 b = splat(x[m * K + k + j]), d = splat(x[m * K + k + j + 1]);
          e0[m] = fma8(b, w0, e0[m]); e1[m] = fma8(b, w1, e1[m]);
          o0[m] = fma8(d, w2, o0[m]); o1[m] = fma8(d, w3, o1[m]);
        }
      }
    }
    v8 s0 = load8(sp), s1 = load8(sp + 8);
    for (int m = 0; m < R; ++m) {
      a0[m] = fma8(e0[m] + o0[m], s0, a0[m]);
      a1[m] = fma8(e1[m] + o1[m], s1, a1[m]);
    }
    if (OFFS) {
      v8 f0 = load8(op), f1 = load8(op + 8);
      for (int m = 0; m < R; ++m) {
        v8 t = splat(xs[m * G + k / g]);
        a0[m] = fma8(t, f0, a0[m]);
        a1[m] = fma8(t, f1, a1[m]);
      }
      op += N;
    }
  }
  for (int m = 0; m < R; ++m) { store8(y + m * N + c, a0[m]); store8(y + m * N + c + 8, a1[m]); }
}

#if defined(__AVX512F__)
// The same sums with one 16-float vector per row: an int4 value becomes a float by a
// 16-entry table lookup on its nibble (vpermps reads the low 4 bits of each index lane),
// fewer instructions per weight than the 8-float path; the same operations lane by lane.
template <int R, int BITS, bool OFFS>
inline void block16(const float* x, int64_t K, const int8_t* q, const float* s, const float* off,
                    const float* xs, int64_t N, int64_t g, int64_t c, int64_t k0, int64_t k1,
                    float* y, bool first) {
  const __m512 table = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  __m512 a[R];
  for (int m = 0; m < R; ++m) a[m] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + m * N + c);
  const int64_t G = K / g;
  const float* sp = s + (k0 / g) * N + c;
  const float* op = OFFS ? off + (k0 / g) * N + c : nullptr;
  for (int64_t k = k0; k < k1; k += g, sp += N) {
    __m512 e[R], o[R];
    for (int m = 0; m < R; ++m) e[m] = o[m] = _mm512_setzero_ps();
    if (BITS == 8) {
      const int8_t* qp = q + k * N + c;
      int64_t j = 0;
      for (; j + 1 < g; j += 2, qp += 2 * N) {
        __m512 we = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp))));
        __m512 wo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp + N))));
        for (int m = 0; m < R; ++m) {
          e[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k + j]), we, e[m]);
          o[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k + j + 1]), wo, o[m]);
        }
      }
      if (j < g) {
        __m512 we = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qp))));
        for (int m = 0; m < R; ++m)
          e[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k + j]), we, e[m]);
      }
    } else {
      const int8_t* qp = q + (k / 2) * N + c;
      for (int64_t j = 0; j < g; j += 2, qp += N) {
        __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qp)));
        __m512 we = _mm512_permutexvar_ps(b, table);
        __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
        for (int m = 0; m < R; ++m) {
          e[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k + j]), we, e[m]);
          o[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * K + k + j + 1]), wo, o[m]);
        }
      }
    }
    __m512 sc = _mm512_loadu_ps(sp);
    for (int m = 0; m < R; ++m) a[m] = _mm512_fmadd_ps(_mm512_add_ps(e[m], o[m]), sc, a[m]);
    if (OFFS) {
      __m512 f = _mm512_loadu_ps(op);
      for (int m = 0; m < R; ++m)
        a[m] = _mm512_fmadd_ps(_mm512_set1_ps(xs[m * G + k / g]), f, a[m]);
      op += N;
    }
  }
  for (int m = 0; m < R; ++m) _mm512_storeu_ps(y + m * N + c, a[m]);
}
#define BLOCK block16
#else
#define BLOCK block
#endif

// ---- int8 activations (`QuantizedWeight.activations == "int8"`) --------------------------------
// Each row's x is rounded to int8 per group of g inputs (the weight's groups), as llama.cpp's
// Q8 activations: d = amax / 127, xq = round-half-even(x * (127 / amax)) (0 where amax is 0),
// so x̂ = xq * d; the product is y = x̂ @ ŵ, formed per group in integers:
//   y = Σ_g d_g * (scale_g * Σ_j xq_j q_j  +  offset_g * Σ_j xq_j).
// The integer sums are exact whatever their order; the float epilogue runs in one fixed
// order per lane (a multiply, a fused multiply-add for the offsets, a fused multiply-add into
// the row's sum), so the VNNI path and the portable one agree bit for bit, and a row's result
// never depends on M.

constexpr int64_t kMaxGroupInt8 = 65536;
constexpr int kWide = 4;   // blocks of 16 columns side by side for one or two int8 rows
constexpr int kMid = 2;    // ... for three or more (registers for kMaxRows rows)

struct Acts {            // one call's rows, quantised once: [M, K] int8, [M, G] scales and sums
  const float* x;        // fp32 x [M, K] (the fp32-activation path)
  const float* xs;       // fp32 group sums of x [M, G] (fp32 path with offsets)
  const int8_t* xq;      // int8 x [M, K]
  const float* xd;       // its scales [M, G]
  const int32_t* xsum;   // Σ xq per group [M, G]
};

// The rows from row m on: each array of `a` advanced by m rows.
inline Acts rows_from(const Acts& a, int64_t m, int64_t K, int64_t G) {
  return Acts{a.x + m * K, a.xs ? a.xs + m * G : nullptr, a.xq ? a.xq + m * K : nullptr,
              a.xd ? a.xd + m * G : nullptr, a.xsum ? a.xsum + m * G : nullptr};
}

// Round rows of x to int8 per group of g (see above). Elementwise IEEE operations and an
// exact maximum: the vector and the scalar loops give the same bytes.
static void quantize_rows(const float* x, int64_t M, int64_t K, int64_t g, int8_t* xq,
                          float* xd, int32_t* xsum) {
  const int64_t G = K / g;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < G; ++i) {
      const float* xp = x + m * K + i * g;
      int8_t* qp = xq + m * K + i * g;
      int64_t j = 0;
      float amax = 0.f;
#if defined(__AVX512F__)
      __m512 vmax = _mm512_setzero_ps();
      for (; j + 16 <= g; j += 16)
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(xp + j)));
      amax = _mm512_reduce_max_ps(vmax);
#endif
      for (; j < g; ++j) amax = std::max(amax, std::fabs(xp[j]));
      float id = amax > 0.f ? 127.f / amax : 0.f;
      xd[m * G + i] = amax / 127.f;
      int32_t s = 0;
      j = 0;
#if defined(__AVX512F__)
      __m512i vs = _mm512_setzero_si512();
      for (; j + 16 <= g; j += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xp + j), _mm512_set1_ps(id)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qp + j), _mm512_cvtsepi32_epi8(v));
        vs = _mm512_add_epi32(vs, v);
      }
      s = _mm512_reduce_add_epi32(vs);
#endif
      for (; j < g; ++j) {
        int32_t v = (int32_t)std::nearbyint(xp[j] * id);
        qp[j] = (int8_t)v;
        s += v;
      }
      xsum[m * G + i] = s;
    }
}

// The group's epilogue for one lane: acc + d * (scale * dot + offset * sum).
template <bool OFFS>
inline float epilogue(int32_t dot, int32_t sum, float d, float s, float off, float acc) {
  float p = (float)dot * s;
  if (OFFS) p = std::fma((float)sum, off, p);
  return std::fma(p, d, acc);
}

// Columns [c0, c0 + n) (n <= 16) of y[0:R] over the groups in rows [k0, k1), their integer
// sums side by side (loops the compiler vectorises over the columns for any ISA).
template <int R, int BITS, bool OFFS>
void lanes_rows(const Acts& a, int64_t K, const int8_t* q, const float* s, const float* off,
                int64_t N, int64_t g, int64_t c0, int n, int64_t k0, int64_t k1, float* y,
                bool first) {
  const int64_t G = K / g;
  float acc[R][kBlock];
  for (int m = 0; m < R; ++m)
    for (int i = 0; i < n; ++i) acc[m][i] = first ? 0.f : y[m * N + c0 + i];
  for (int64_t k = k0; k < k1; k += g) {
    int32_t dot[R][kBlock] = {};
    int8_t pad[kBlock] = {0};                      // a partial block's bytes, zero past n
    for (int64_t j = 0; j < g; ++j) {
      const int8_t* row = q + (BITS == 4 ? (k + j) / 2 : k + j) * N + c0;
      if (n < kBlock) row = (const int8_t*)std::memcpy(pad, row, n);
      for (int m = 0; m < R; ++m) {
        const int32_t xv = a.xq[m * K + k + j];
        if (BITS == 8 || ((k + j) & 1))            // int8, or the high nibbles: odd rows
          for (int i = 0; i < kBlock; ++i) dot[m][i] += xv * (BITS == 4 ? row[i] >> 4 : row[i]);
        else
          for (int i = 0; i < kBlock; ++i)
            dot[m][i] += xv * ((int8_t)((uint8_t)row[i] << 4) >> 4);
      }
    }
    const float* sp = s + (k / g) * N + c0;
    for (int m = 0; m < R; ++m) {
      const int64_t gi = m * G + k / g;
      for (int i = 0; i < n; ++i)
        acc[m][i] = epilogue<OFFS>(dot[m][i], a.xsum[gi], a.xd[gi], sp[i],
                                   OFFS ? off[(k / g) * N + c0 + i] : 0.f, acc[m][i]);
    }
  }
  for (int m = 0; m < R; ++m)
    for (int i = 0; i < n; ++i) y[m * N + c0 + i] = acc[m][i];
}

// Columns [c, c_end) of y[0:R] over the groups in rows [k0, k1), 16 at a time: the
// portable path (slower than the fp32-activation path: without VNNI, int8 activations
// save nothing), and the columns past the last whole block.
template <int BITS, bool OFFS>
void lanes_q8(int R, const Acts& a, int64_t K, const int8_t* q, const float* s, const float* off,
              int64_t N, int64_t g, int64_t c, int64_t c_end, int64_t k0, int64_t k1, float* y,
              bool first) {
  const int64_t G = K / g;
  for (int64_t c0 = c; c0 < c_end; c0 += kBlock)
    for (int m = 0; m < R; ++m)      // a row at a time: what the compiler vectorises best
      lanes_rows<1, BITS, OFFS>(rows_from(a, m, K, G), K, q, s, off, N, g, c0,
                                (int)std::min<int64_t>(kBlock, c_end - c0), k0, k1, y + m * N,
                                first);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SPECSIM_VNNI 1
typedef int32_t i32u __attribute__((may_alias, aligned(1)));

// up to 4 bytes of a row's int8 x, zero past n, as one 32-bit lane
inline int32_t x4(const int8_t* p, int64_t n) {
  uint32_t v = 0;
  if (n >= 4) { std::memcpy(&v, p, 4); return (int32_t)v; }
  for (int64_t i = 0; i < n && i < 4; ++i) v |= (uint32_t)(uint8_t)p[i] << (8 * i);
  return (int32_t)v;
}

// Byte tables for the VBMI unpacking (vpermt2b picks bytes of two vectors, vpmultishiftqb
// takes 8 bits at any offset of its qword).
struct Table64 { uint8_t b[64]; };
constexpr Table64 make_table(int kind) {
  Table64 t{};
  for (int c = 0; c < 16; ++c)
    for (int i = 0; i < 4; ++i) {
      int at = 4 * c + i;
      if (kind == 0)        // int4: lane c = [row i byte c, row i+1 byte c, -, -]
        t.b[at] = (uint8_t)(i == 0 ? c : i == 1 ? 64 + c : c);
      else if (kind == 1)   // int4: the lane's nibbles at bits 0, 4, 8, 12 of its half-qword
        t.b[at] = (uint8_t)(32 * (c & 1) + 4 * i);
      else                  // int8: lane c = [r0 c, r1 c, r2 c, r3 c] of r0|r1 and r2|r3
        t.b[at] = (uint8_t)((i >= 2 ? 64 : 0) + 16 * (i & 1) + c);
    }
  return t;
}
constexpr Table64 kPick4 = make_table(0), kShift4 = make_table(1), kPick8 = make_table(2);

// The constants of the unpacking, loaded once per block.
struct Unpack {
  __m512i flip4 = _mm512_set1_epi32(0x00880088), nib = _mm512_set1_epi32(0x0F0F0F0F);
  __m512i flip8 = _mm512_set1_epi32((int32_t)0x80808080);
  __m512i pick4 = _mm512_loadu_si512(kPick4.b), shift4 = _mm512_loadu_si512(kShift4.b);
  __m512i pick8 = _mm512_loadu_si512(kPick8.b), low = _mm512_set1_epi8(0x0F);
  __m512i eight = _mm512_set1_epi8(0x08);
};

inline __m512i load16z(const int8_t* p) {
  return _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows k+j .. k+j+3 (of a group of g, zero past it) of columns c..c+15 as unsigned bytes,
// 4 to a 32-bit lane in row order: q + 8 (int4) or q + 128 (int8).
template <int BITS>
__attribute__((always_inline)) inline __m512i weights_u8(const Unpack& u, const int8_t* q, int64_t N, int64_t g, int64_t k,
                          int64_t j, int64_t c) {
  if (BITS == 4) {
    const int8_t* qp = q + ((k + j) / 2) * N + c;
    __m512i r0 = load16z(qp), r1 = j + 2 < g ? load16z(qp + N) : _mm512_setzero_si512();
#if defined(__AVX512VBMI__)
    // [b_i, b_i+1] at the lane's start, each nibble to a byte, (x & 0x0F) ^ 0x08
    __m512i v = _mm512_multishift_epi64_epi8(u.shift4, _mm512_permutex2var_epi8(r0, u.pick4, r1));
    return _mm512_ternarylogic_epi32(v, u.low, u.eight, 0x6A);                       // (a&b)^c
#else
    // zero-extended to 32-bit lanes and joined, w = b_i | b_i+1 << 16 (nibbles flipped by
    // 8), (w | w << 4) & 0x0F0F0F0F
    __m512i a = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(r0));
    __m512i b = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(r1));
    __m512i w = _mm512_ternarylogic_epi32(a, _mm512_slli_epi32(b, 16), u.flip4, 0x56);  // (a|b)^c
    return _mm512_ternarylogic_epi32(w, _mm512_slli_epi32(w, 4), u.nib, 0xA8);         // (a|b)&c
#endif
  }
  const int8_t* qp = q + (k + j) * N + c;
  __m512i r[4];
  for (int t = 0; t < 4; ++t) r[t] = j + t < g ? load16z(qp + t * N) : _mm512_setzero_si512();
#if defined(__AVX512VBMI__)
  __m512i a = _mm512_inserti32x4(r[0], _mm512_castsi512_si128(r[1]), 1);
  __m512i b = _mm512_inserti32x4(r[2], _mm512_castsi512_si128(r[3]), 1);
  return _mm512_xor_si512(_mm512_permutex2var_epi8(a, u.pick8, b), u.flip8);
#else
  __m512i a[4];
  for (int t = 0; t < 4; ++t) a[t] = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(r[t]));
  __m512i w = _mm512_ternarylogic_epi32(a[0], _mm512_slli_epi32(a[1], 8),
                                        _mm512_slli_epi32(a[2], 16), 0xFE);            // a|b|c
  return _mm512_ternarylogic_epi32(w, _mm512_slli_epi32(a[3], 24), u.flip8, 0x56);
#endif
}

// y[0:R, c:c+16*NB] over the groups in rows [k0, k1) with VNNI: each 32-bit lane (a column)
// holds 4 consecutive weights as unsigned bytes (q + 8 for int4, q + 128 for int8,
// `weights_u8`) and vpdpbusd adds their products with 4 bytes of x; Σ xq (q + b) - b Σ xq
// = Σ xq q exactly. int4: byte rows i, i+1 hold rows 2i..2i+3; zero-extended to 32-bit
// lanes and joined, u = b_i | b_{i+1} << 16 (its nibbles flipped by 8), (u | u << 4) &
// 0x0F0F0F0F puts the four nibbles in the lane's four bytes in row order. NB blocks of
// 16 columns side by side (NB 4: whole cache lines of int8 weights) and C chains of sums
// per row and block, so that few rows do not wait on vpdpbusd's latency (integers: the
// order of the sums changes nothing).
template <int R, int NB, int BITS, bool OFFS>
__attribute__((always_inline)) inline void block_q8(const Acts& a, int64_t K, const int8_t* q, const float* s,
                     const float* off, int64_t N, int64_t g, int64_t c, int64_t k0, int64_t k1,
                     float* y, bool first) {
  constexpr int C = R * NB >= 4 ? 1 : (R * NB >= 2 ? 2 : 4);
  const int64_t G = K / g;
  constexpr int32_t bias = BITS == 4 ? 8 : 128;
  const Unpack u;
  __m512 acc[R][NB];
  for (int m = 0; m < R; ++m)
    for (int b = 0; b < NB; ++b)
      acc[m][b] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + m * N + c + 16 * b);
  const float* sp = s + (k0 / g) * N + c;
  const float* op = OFFS ? off + (k0 / g) * N + c : nullptr;
  for (int64_t k = k0; k < k1; k += g, sp += N) {
    __m512i dot[R][NB][C];
    for (int m = 0; m < R; ++m)
      for (int b = 0; b < NB; ++b)
        for (int h = 0; h < C; ++h) dot[m][b][h] = _mm512_setzero_si512();
    const int64_t whole = g & ~(int64_t)3;         // rows in whole lanes of 4
    for (int64_t j0 = 0; j0 < whole; j0 += 4 * C)
      for (int h = 0; h < C; ++h) {
        int64_t j = j0 + 4 * h;
        if (C > 1 && j >= whole) break;
        for (int b = 0; b < NB; ++b) {
          __m512i w = weights_u8<BITS>(u, q, N, g, k, j, c + 16 * b);
          for (int m = 0; m < R; ++m)      // 4 bytes of x broadcast from memory
            dot[m][b][h] = _mm512_dpbusd_epi32(
                dot[m][b][h], w, _mm512_set1_epi32(*reinterpret_cast<const i32u*>(
                                     a.xq + m * K + k + j)));
        }
      }
    if (whole < g)                                 // the group's last 1-3 rows
      for (int b = 0; b < NB; ++b) {
        __m512i w = weights_u8<BITS>(u, q, N, g, k, whole, c + 16 * b);
        for (int m = 0; m < R; ++m)
          dot[m][b][0] = _mm512_dpbusd_epi32(
              dot[m][b][0], w, _mm512_set1_epi32(x4(a.xq + m * K + k + whole, g - whole)));
      }
    for (int b = 0; b < NB; ++b) {
      __m512 sc = _mm512_loadu_ps(sp + 16 * b);
      __m512 of = OFFS ? _mm512_loadu_ps(op + 16 * b) : sc;
      for (int m = 0; m < R; ++m) {
        int64_t gi = m * G + k / g;
        __m512i d = _mm512_set1_epi32(-bias * a.xsum[gi]);
        for (int h = 0; h < C; ++h) d = _mm512_add_epi32(d, dot[m][b][h]);
        __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(d), sc);
        if (OFFS) p = _mm512_fmadd_ps(_mm512_set1_ps((float)a.xsum[gi]), of, p);
        acc[m][b] = _mm512_fmadd_ps(p, _mm512_set1_ps(a.xd[gi]), acc[m][b]);
      }
    }
    if (OFFS) op += N;
  }
  for (int m = 0; m < R; ++m)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(y + m * N + c + 16 * b, acc[m][b]);
}
#endif

// f(std::integral_constant<int, r>{}) for r = R rows (1 .. kMaxRows; more: kMaxRows).
template <typename F>
inline void with_rows(int R, F&& f) {
  switch (R) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    default: f(std::integral_constant<int, kMaxRows>{}); break;
  }
}

template <int BITS, bool OFFS>
void rows(int R, const float* x, int64_t K, const int8_t* q, const float* s, const float* off,
          const float* xs, int64_t N, int64_t g, int64_t c, int64_t k0, int64_t k1, float* y,
          bool first) {
  with_rows(R, [&](auto r) {
    BLOCK<decltype(r)::value, BITS, OFFS>(x, K, q, s, off, xs, N, g, c, k0, k1, y, first);
  });
}

template <int BITS, bool OFFS>
void rows_q8(int R, const Acts& a, int64_t K, const int8_t* q, const float* s, const float* off,
             int64_t N, int64_t g, int64_t c, int64_t k0, int64_t k1, float* y, bool first,
             bool portable) {
#if defined(SPECSIM_VNNI)
  if (!portable) {
    with_rows(R, [&](auto r) {
      block_q8<decltype(r)::value, 1, BITS, OFFS>(a, K, q, s, off, N, g, c, k0, k1, y, first);
    });
    return;
  }
#endif
  lanes_q8<BITS, OFFS>(R, a, K, q, s, off, N, g, c, c + kBlock, k0, k1, y, first);
}


// A prefetch cursor over rows [r, end) of a row-major array, `bytes` bytes of each row
// (this part's columns) from `base`, with `stride` bytes between rows.
struct Stream {
  const char* base;
  int64_t stride, bytes, r, end, b = 0;
  void ahead(int64_t lines) {
    for (int64_t i = 0; i < lines && r < end; ++i) {
      __builtin_prefetch(base + r * stride + b, 0, 3);
      b += kLine;
      if (b >= bytes) { b = 0; ++r; }
    }
  }
};

// Columns [c0, c1) of y, in panels of about 32 KB of packed weights (this part's columns),
// each consumed block by block while the next panel's weights, scales and offsets are
// prefetched in address order (as small_matmul.cc's part_nn does). `a`: the rows, as fp32
// (and each row's group sums of x, offsets only) or, with ACT8, as int8 (`quantize_rows`);
// `portable`: ACT8's lane-by-lane loop even where VNNI is built (the same results).
template <int BITS, bool OFFS, bool ACT8>
void part(const Acts& a, int64_t M, int64_t K, const int8_t* q, const float* s, const float* off,
          int64_t N, int64_t g, int64_t c0, int64_t c1, float* y, bool portable) {
  const int64_t G = K / g;
  const float* x = a.x;
  const float* xs = a.xs;
  constexpr int64_t per = BITS == 4 ? 2 : 1;     // weight rows per byte row
  int64_t cols = c1 - c0;
  int64_t cb_end = c0 + (cols / kBlock) * kBlock;
  int64_t panel = per * std::max<int64_t>(8, std::min<int64_t>(K / per, (32 << 10) / cols));
  panel = std::min(K, (panel + g - 1) / g * g);   // whole groups
  for (int64_t k0 = 0; k0 < K; k0 += panel) {
    int64_t k1 = std::min(K, k0 + panel), k2 = std::min(K, k1 + panel);
    bool first = k0 == 0;
    Stream wq{reinterpret_cast<const char*>(q + c0), N, cols, k1 / per, k2 / per};
    Stream ws{reinterpret_cast<const char*>(s + c0), N * 4, cols * 4, k1 / g,
              k2 > k1 ? (k2 - 1) / g + 1 : k1 / g};
    Stream wo = ws;
    if (OFFS) wo.base = reinterpret_cast<const char*>(off + c0);
    int64_t blocks = std::max<int64_t>(1, cols / kBlock);
    int64_t wq_lines = ((wq.end - wq.r) * cols + kLine - 1) / kLine;
    int64_t ws_lines = ((ws.end - ws.r) * cols * 4 + kLine - 1) / kLine;
    int64_t wq_per = (wq_lines + blocks - 1) / blocks, ws_per = (ws_lines + blocks - 1) / blocks;
    auto prefetch = [&](int nb) {                 // the next panel's share of nb blocks
      for (int i = 0; i < nb; ++i) {
        wq.ahead(wq_per);
        ws.ahead(ws_per);
        if (OFFS) wo.ahead(ws_per);
      }
    };
    for (int64_t c = c0; c < cb_end; c += kBlock) {
#if defined(SPECSIM_VNNI)
      if (ACT8 && !portable && M <= 2 && c + kWide * kBlock <= cb_end) {
        // a decode step or a 2-token verify: whole cache lines a row
        if (M == 1) block_q8<1, kWide, BITS, OFFS>(a, K, q, s, off, N, g, c, k0, k1, y, first);
        else block_q8<2, kWide, BITS, OFFS>(a, K, q, s, off, N, g, c, k0, k1, y, first);
        prefetch(kWide);
        c += (kWide - 1) * kBlock;
        continue;
      }
      if (ACT8 && !portable && c + kMid * kBlock <= cb_end) {
        // a verify pass of 3 or more: kMid blocks, up to kMaxRows rows at once (halves
        // past it), so a block's weights are unpacked once per kMaxRows rows
        for (int64_t m = 0; m < M;) {
          int64_t R = M - m <= kMaxRows ? M - m : std::min<int64_t>(kMaxRows, (M - m + 1) / 2);
          with_rows((int)R, [&](auto r) {
            block_q8<decltype(r)::value, kMid, BITS, OFFS>(rows_from(a, m, K, G), K, q, s, off,
                                                          N, g, c, k0, k1, y + m * N, first);
          });
          m += R;
        }
        prefetch(kMid);
        c += (kMid - 1) * kBlock;
        continue;
      }
#endif
      for (int64_t m = 0; m < M; m += kMaxRows) {
        int R = (int)std::min<int64_t>(kMaxRows, M - m);
        if (ACT8)
          rows_q8<BITS, OFFS>(R, rows_from(a, m, K, G), K, q, s, off, N, g, c, k0, k1,
                              y + m * N, first, portable);
        else
          rows<BITS, OFFS>(R, x + m * K, K, q, s, off, xs + (OFFS ? m * G : 0), N, g, c, k0,
                           k1, y + m * N, first);
      }
      prefetch(1);
    }
    if (ACT8 && cb_end < c1)                       // columns past the last whole block
      lanes_q8<BITS, OFFS>((int)M, a, K, q, s, off, N, g, cb_end, c1, k0, k1, y, first);
    for (int64_t c = cb_end; !ACT8 && c < c1; ++c)
      for (int64_t m = 0; m < M; ++m) {
        float acc = first ? 0.f : y[m * N + c];
        for (int64_t k = k0; k < k1; k += g) {
          float e = 0.f, o = 0.f;
          for (int64_t j = 0; j < g; ++j) {
            float p = x[m * K + k + j] * value<BITS>(q, N, k + j, c);
            if (j & 1) o += p; else e += p;
          }
          acc += (e + o) * s[(k / g) * N + c];
          if (OFFS) acc += xs[m * G + k / g] * off[(k / g) * N + c];
        }
        y[m * N + c] = acc;
      }
  }
}

ffi::Error bad(const std::string& what) {
  return ffi::Error::InvalidArgument("small_matmul_quantized: " + what);
}

}  // namespace

// x [M, K] f32; q [L, K, N] s8 (bits 8) or [L, K/2, N] (bits 4, packed); scales [L, K/g, N]
// f32; offsets f32 like scales, read only when has_offsets is 1 (else any buffer); layer s32
// (clamped to [0, L)); y [M, N] = x @ (q[l] * scales[l] (+ offsets[l]) per group of g rows),
// with x rounded to int8 per group first where int8_activations is 1 (`quantize_rows`);
// portable 1: that product by the lane-by-lane loop, not VNNI (for tests; same results).
static ffi::Error SmallMatmulGrouped(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                                     ffi::Buffer<ffi::S8> q, ffi::Buffer<ffi::F32> scales,
                                     ffi::Buffer<ffi::F32> offsets, ffi::Buffer<ffi::S32> layer,
                                     ffi::ResultBuffer<ffi::F32> y, int32_t bits,
                                     int32_t has_offsets, int32_t int8_activations,
                                     int32_t portable) {
  auto xd = x.dimensions(), qd = q.dimensions(), sd = scales.dimensions();
  if (bits != 4 && bits != 8) return bad("bits must be 4 or 8");
  if (xd.size() != 2 || qd.size() != 3 || sd.size() != 3)
    return bad("x must be [M, K], q [L, K or K/2, N] and scales [L, K/g, N]");
  int64_t per = bits == 4 ? 2 : 1;
  int64_t M = xd[0], K = xd[1], L = qd[0], N = qd[2], G = sd[1];
  if (qd[1] * per != K) return bad("q's rows do not match x's contraction size");
  if (sd[0] != L || sd[2] != N) return bad("scales must be [L, K/g, N] like q");
  if (G < 1 || K % G) return bad("the number of groups must divide K");
  bool offs = has_offsets != 0, act8 = int8_activations != 0;
  if (offs) {
    auto od = offsets.dimensions();
    if (od.size() != 3 || od[0] != L || od[1] != G || od[2] != N)
      return bad("offsets must be [L, K/g, N] like scales");
  }
  int64_t g = K / G;
  if (bits == 4 && g % 2) return bad("the group size must be even for 4 bits");
  // a group's integer sum Σ xq (q + 128) must fit int32
  if (act8 && g > kMaxGroupInt8)
    return bad("the group size must be at most 65536 with int8 activations");
  int64_t l = clamp_layer(layer.typed_data()[0], L);
  const float* xp = x.typed_data();
  const int8_t* ql = q.typed_data() + l * (K / per) * N;
  const float* sl = scales.typed_data() + l * G * N;
  const float* ol = offs ? offsets.typed_data() + l * G * N : nullptr;
  float* yp = y->typed_data();
  // each row's group sums of x (fp32 path) or its int8 form (int8 path), in one fixed
  // order (a row's result never depends on M)
  std::vector<float> sums(offs && !act8 ? M * G : 0), xscale(act8 ? M * G : 0);
  std::vector<int8_t> xq(act8 ? M * K : 0);
  std::vector<int32_t> xsum(act8 ? M * G : 0);
  for (int64_t m = 0; offs && !act8 && m < M; ++m)
    for (int64_t i = 0; i < G; ++i) {
      float t = 0.f;
      for (int64_t j = 0; j < g; ++j) t += xp[m * K + i * g + j];
      sums[m * G + i] = t;
    }
  if (act8) quantize_rows(xp, M, K, g, xq.data(), xscale.data(), xsum.data());
  const Acts a{xp, sums.data(), xq.data(), xscale.data(), xsum.data()};
  bool port = portable != 0;
  run_column_parts(pool, N, [=](int64_t c0, int64_t c1) {
#define GROUPED_PART(B, O, A) part<B, O, A>(a, M, K, ql, sl, ol, N, g, c0, c1, yp, port)
    if (act8) {
      if (bits == 4 && offs) GROUPED_PART(4, true, true);
      else if (bits == 4) GROUPED_PART(4, false, true);
      else if (offs) GROUPED_PART(8, true, true);
      else GROUPED_PART(8, false, true);
    } else {
      if (bits == 4 && offs) GROUPED_PART(4, true, false);
      else if (bits == 4) GROUPED_PART(4, false, false);
      else if (offs) GROUPED_PART(8, true, false);
      else GROUPED_PART(8, false, false);
    }
#undef GROUPED_PART
  });
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsimSmallMatmulGrouped, SmallMatmulGrouped,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int32_t>("bits")
                                  .Attr<int32_t>("has_offsets")
                                  .Attr<int32_t>("int8_activations")
                                  .Attr<int32_t>("portable"));
