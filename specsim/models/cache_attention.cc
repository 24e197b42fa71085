// Attention of a few new tokens over the KV cache, in place, for XLA:CPU (XLA FFI;
// `specsim.models.kernels.cache_attention`):
//   out[b, t, h] = softmax_s(q[b, t, h] . k[l, b, s, g] / sqrt(E)) @ v[l, b, s, g]
// over the slots s <= positions[b, t] (s < S), g = h / (H / G) the query head's kv head,
// for the new tokens of a decode step or a verify pass (T small).
//
// Why: under lax.scan XLA:CPU copies each layer's keys and values out of the stacked
// [L, B, S, G, E] cache before its dots, and attends every one of the S preallocated
// slots. SmolLM2-135M, 40 greedy steps after ~150-token prompts (XLA's per-op profile,
// 2-core AMD EPYC): the copies were 8% of a step at batch 1 and 512 slots, 22% at batch 8
// and 512 slots, 35% at batch 8 and 2048 slots, where the masked-out slots' dots took as
// much again. Here each (row, kv head) reads its keys and values once, in place, and only
// the slots up to the row's last position: a step's cost follows the context, not the
// cache's size.
//
// A query's result does not depend on T, on the batch, or on the thread count (each query
// sums over slots, and over E, in one fixed order), so a verify pass and a decode step
// agree bit for bit. A query with no slot to attend (a negative position) gets NaN, as the
// masked softmax does.
//
// A token tree's pass (`specsim.kernels.tree_attention`, SpecsimTreeAttention) attends,
// per query, the slots before its row's start and, of the W slots from there, those its
// mask row allows (its ancestors and itself). Those slots are listed in slot order and
// summed exactly as the same number of contiguous slots would be, so a node's result
// equals, bit for bit, a decode step's over its path moved to contiguous slots.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_common.h"

// The 8 sums of a[0..7]'s lanes, as one vector: [sum a0, ..., sum a7], each summed as
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
static inline v8 sum8x8(const v8* a) {
#if defined(__AVX__)
  __m256 h01 = _mm256_hadd_ps((__m256)a[0], (__m256)a[1]);
  __m256 h23 = _mm256_hadd_ps((__m256)a[2], (__m256)a[3]);
  __m256 h45 = _mm256_hadd_ps((__m256)a[4], (__m256)a[5]);
  __m256 h67 = _mm256_hadd_ps((__m256)a[6], (__m256)a[7]);
  __m256 lo4 = _mm256_hadd_ps(h01, h23), hi4 = _mm256_hadd_ps(h45, h67);
  return (v8)_mm256_add_ps(_mm256_permute2f128_ps(lo4, hi4, 0x20),
                           _mm256_permute2f128_ps(lo4, hi4, 0x31));
#else
  v8 out;
  for (int j = 0; j < 8; ++j)
    out[j] = ((a[j][0] + a[j][1]) + (a[j][2] + a[j][3])) + ((a[j][4] + a[j][5]) + (a[j][6] + a[j][7]));
  return out;
#endif
}

typedef int32_t i8v __attribute__((vector_size(32)));

// exp(x) of 8 floats at once (x <= 0 here: scores less their maximum): 2^n * e^r with
// n = floor(x log2 e + 1/2), r = x - n ln 2 (ln 2 in two parts), e^r by Cephes' expf
// polynomial (about 1 ulp); below -87.3 the result is 0, e^x's float underflow.
static inline v8 exp8(v8 x) {
  const v8 lo = splat(-87.3f);
  v8 under = (v8)(x < lo);                                     // all ones where x < lo
  x = x < lo ? lo : x;
  v8 t = x * splat(1.44269504088896341f) + splat(0.5f);
  i8v n = __builtin_convertvector(t, i8v);                     // toward zero
  v8 nf = __builtin_convertvector(n, v8);
  n += (i8v)(nf > t);                                          // floor: -1 where it rounded up
  nf = __builtin_convertvector(n, v8);
  v8 r = x - nf * splat(0.693359375f);
  r = r - nf * splat(-2.12194440e-4f);
  v8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  v8 y = p * (r * r) + r + splat(1.f);
  v8 scale = (v8)((n + 127) << 23);
  return (v8)((i8v)(y * scale) & ~(i8v)under);
}

// Slots a query at position p attends: 0..p, at most S (none for a negative position).
static inline int64_t slots_to(int64_t p, int64_t S) {
  return std::min<int64_t>(std::max<int64_t>(p + 1, 0), S);
}

struct Shape {
  int64_t B, T, H, E, S, G, R;
};

// Slot i of a query's list: idx[i], or i where the slots are contiguous (idx null).
static inline int64_t slot_at(const int32_t* idx, int64_t i) { return idx ? idx[i] : i; }

// Query qv [E] against n slots of keys ks (slot s at ks + s * stride; the slots idx[0..n),
// or 0..n when idx is null): w[i] = q . k_slot(i) * scale, 8 slots at a time (the lanes of
// each slot's products, then `sum8x8`, then the columns past the last 8 in order).
static void scores_of(const float* qv, const float* ks, int64_t stride, const int32_t* idx,
                      int64_t n, int64_t E, float scale, float* w) {
  for (int64_t s0 = 0; s0 < n; s0 += 8) {
    const float* k[8];
    for (int j = 0; j < 8; ++j) k[j] = ks + slot_at(idx, s0 + j < n ? s0 + j : s0) * stride;
    v8 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = splat(0.f);
    const int64_t E8 = (E / 8) * 8;
    for (int64_t e = 0; e < E8; e += 8) {
      v8 q8 = load8(qv + e);
      for (int j = 0; j < 8; ++j) acc[j] = fma8(q8, load8(k[j] + e), acc[j]);
    }
    v8 d = sum8x8(acc);
    for (int64_t e = E8; e < E; ++e)
      for (int j = 0; j < 8; ++j) d[j] += qv[e] * k[j][e];
    d *= splat(scale);
    for (int j = 0; j < 8 && s0 + j < n; ++j) w[s0 + j] = d[j];
  }
}

// w[0:n] = exp(w - max w), returning sum w (vectors of 8, then the tail).
static float softmax_numerators(float* w, int64_t n) {
  const int64_t n8 = (n / 8) * 8;
  v8 mv = splat(-std::numeric_limits<float>::infinity());
  for (int64_t s = 0; s < n8; s += 8) { v8 x = load8(w + s); mv = x > mv ? x : mv; }
  float m = mv[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, mv[i]);
  for (int64_t s = n8; s < n; ++s) m = std::max(m, w[s]);
  v8 sv = splat(0.f);
  for (int64_t s = 0; s < n8; s += 8) {
    v8 e = exp8(load8(w + s) - splat(m));
    store8(w + s, e);
    sv += e;
  }
  float sum = hsum(sv);
  for (int64_t s = n8; s < n; ++s) { w[s] = exp8(splat(w[s] - m))[0]; sum += w[s]; }
  return sum;
}

// out[0:E] = (sum_i w[i] v_slot(i)) * f over n slots of values vs (slot s at vs + s *
// stride; the slots idx[0..n), or 0..n when idx is null), in list order, 64 columns at a
// time with the sums in registers, then the columns past the last 8. kListed: idx given
// (a template, so the contiguous loop keeps its stride walk).
template <bool kListed>
static void weighted_values(const float* w, const float* vs, int64_t stride,
                            const int32_t* idx, int64_t n, int64_t E, float f, float* out) {
  for (int64_t e0 = 0; e0 + 8 <= E; e0 += 64) {
    const int nv = (int)std::min<int64_t>(8, (E - e0) / 8);
    v8 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = splat(0.f);
    const float* v = vs + e0;
    for (int64_t s = 0; s < n; ++s, v += stride) {
      const float* vv = kListed ? vs + idx[s] * stride + e0 : v;
      v8 ws = splat(w[s]);
      for (int j = 0; j < nv; ++j) acc[j] = fma8(ws, load8(vv + 8 * j), acc[j]);
    }
    for (int j = 0; j < nv; ++j) store8(out + e0 + 8 * j, acc[j] * splat(f));
  }
  for (int64_t e = (E / 8) * 8; e < E; ++e) {
    float a = 0.f;
    for (int64_t s = 0; s < n; ++s) a += w[s] * vs[slot_at(kListed ? idx : nullptr, s) * stride + e];
    out[e] = a * f;
  }
}

// One query's output over n slots (idx as in `scores_of`): NaN where n is 0.
template <bool kListed>
static void attend_query(const float* qv, const float* ks, const float* vs, int64_t stride,
                         const int32_t* idx, int64_t n, int64_t E, float scale, float* w,
                         float* out) {
  if (n == 0) {
    std::fill(out, out + E, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  scores_of(qv, ks, stride, idx, n, E, scale, w);
  float sum = softmax_numerators(w, n);
  weighted_values<kListed>(w, vs, stride, idx, n, E, 1.f / sum, out);
}

// One (row b, kv head g): its T x R queries against slots [0, n_t) of layer l's keys and
// values (kl, vl: [B, S, G, E]). w: scratch of S floats.
static void attend_head(const Shape& d, const float* q, const float* kl, const float* vl,
                        const int32_t* pos, float* out, int64_t b, int64_t g, float scale,
                        std::vector<float>& w) {
  const int64_t E = d.E, stride = d.G * d.E;
  const float* ks = kl + (b * d.S * d.G + g) * E;
  const float* vs = vl + (b * d.S * d.G + g) * E;
  w.resize(std::max<int64_t>(d.S, 8));
  for (int64_t t = 0; t < d.T; ++t) {
    const int64_t n = slots_to(pos[b * d.T + t], d.S);
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t h = (b * d.T + t) * d.H + g * d.R + r;
      attend_query<false>(q + h * E, ks, vs, stride, nullptr, n, E, scale, w.data(),
                          out + h * E);
    }
  }
}

// `attend_head` for a token tree: query t attends slots [0, start[b]) and, of the W slots
// from start[b], slot start[b] + u where rows[b, t, u] is nonzero (slots past S dropped).
static void attend_tree_head(const Shape& d, int64_t W, const float* q, const float* kl,
                             const float* vl, const int32_t* start, const int8_t* rows,
                             float* out, int64_t b, int64_t g, float scale,
                             std::vector<float>& w, std::vector<int32_t>& idx) {
  const int64_t E = d.E, stride = d.G * d.E;
  const float* ks = kl + (b * d.S * d.G + g) * E;
  const float* vs = vl + (b * d.S * d.G + g) * E;
  w.resize(std::max<int64_t>(d.S, 8));
  idx.resize(std::max<int64_t>(d.S, 1));
  const int64_t s0 = std::min<int64_t>(std::max<int64_t>(start[b], 0), d.S);
  for (int64_t s = 0; s < s0; ++s) idx[s] = (int32_t)s;
  for (int64_t t = 0; t < d.T; ++t) {
    int64_t n = s0;
    const int8_t* mrow = rows + (b * d.T + t) * W;
    for (int64_t u = 0; u < W; ++u) {
      const int64_t s = (int64_t)start[b] + u;
      if (mrow[u] && s >= 0 && s < d.S) idx[n++] = (int32_t)s;
    }
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t h = (b * d.T + t) * d.H + g * d.R + r;
      attend_query<true>(q + h * E, ks, vs, stride, idx.data(), n, E, scale, w.data(),
                         out + h * E);
    }
  }
}

// What both handlers read: the shapes, layer l's keys and values, q, out and 1/sqrt(E).
struct Operands {
  Shape d;
  const float *q, *kl, *vl;
  float* out;
  float scale;
};

// q [B, T, H, E]; k, v [L, B, S, G, E]; layer s32[] (clamped as k[layer] is), checked and
// read into `o`; `name` prefixes the errors.
static ffi::Error read_operands(const char* name, ffi::Buffer<ffi::F32>& q,
                                ffi::Buffer<ffi::F32>& k, ffi::Buffer<ffi::F32>& v,
                                ffi::Buffer<ffi::S32>& layer, ffi::ResultBuffer<ffi::F32>& out,
                                Operands& o) {
  auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 5 || vd.size() != 5)
    return ffi::Error::InvalidArgument(std::string(name) +
                                       ": q must be [B, T, H, E], k and v [L, B, S, G, E]");
  for (int i = 0; i < 5; ++i)
    if (kd[i] != vd[i])
      return ffi::Error::InvalidArgument(std::string(name) + ": k and v differ in shape");
  Shape d{qd[0], qd[1], qd[2], qd[3], kd[2], kd[3], 0};
  if (kd[1] != d.B || kd[4] != d.E || d.G <= 0 || d.H % d.G != 0)
    return ffi::Error::InvalidArgument(
        std::string(name) + ": batch or head size disagree, or H is not a multiple of G");
  d.R = d.H / d.G;
  const int64_t l = clamp_layer(layer.typed_data()[0], kd[0]);
  const int64_t per_layer = d.B * d.S * d.G * d.E;
  o = Operands{d, q.typed_data(), k.typed_data() + l * per_layer,
               v.typed_data() + l * per_layer, out->typed_data(),
               1.f / std::sqrt((float)d.E)};
  return ffi::Error::Success();
}

// Run head(b, g, w, idx) for every (row, kv head), split over the pool by ``slots`` (the
// slot-heads read in all): at least 128 slot-heads a part, so a SmolLM2 step splits from
// about 43 positions on. One part leaves the pool idle for the whole call, its threads
// fall asleep, and waking one costs the next matmul call more than the attention saved
// (docs/studies/int4.md).
template <typename F>
static void for_each_head(ffi::ThreadPool& pool, const Shape& d, int64_t slots, F&& head) {
  const int64_t units = d.B * d.G;
  int parts = std::min<int64_t>(units, n_parts(pool, slots, 128));
  run_parts(pool, parts, [=](int p) {
    std::vector<float> w;
    std::vector<int32_t> idx;
    for (int64_t u = units * p / parts; u < units * (p + 1) / parts; ++u)
      head(u / d.G, u % d.G, w, idx);
  });
}

// q [B, T, H, E]; k, v [L, B, S, G, E]; layer s32[]; positions [B, T] s32; out [B, T, H, E].
static ffi::Error CacheAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                                 ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                                 ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> positions,
                                 ffi::ResultBuffer<ffi::F32> out) {
  Operands o;
  if (auto e = read_operands("cache_attention", q, k, v, layer, out, o); e.failure()) return e;
  const Shape d = o.d;
  auto pd = positions.dimensions();
  if (pd.size() != 2 || pd[0] != d.B || pd[1] != d.T)
    return ffi::Error::InvalidArgument("cache_attention: positions must be [B, T]");
  const int32_t* pos = positions.typed_data();
  int64_t slots = 0;                          // slots read over all rows: the work to split
  for (int64_t b = 0; b < d.B; ++b) {
    int64_t m = 0;
    for (int64_t t = 0; t < d.T; ++t) m = std::max(m, slots_to(pos[b * d.T + t], d.S));
    slots += m * d.G;
  }
  for_each_head(pool, d, slots, [=](int64_t b, int64_t g, std::vector<float>& w,
                                    std::vector<int32_t>&) {
    attend_head(d, o.q, o.kl, o.vl, pos, o.out, b, g, o.scale, w);
  });
  return ffi::Error::Success();
}

// The arguments both handlers begin with: the pool, q, k, v and the layer.
static auto attention_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::S32>>();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsimCacheAttention, CacheAttention,
                              attention_binding()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// q [B, T, H, E]; k, v [L, B, S, G, E]; layer s32[]; start [B] s32; rows [B, T, W] s8;
// out [B, T, H, E]. The tree form of `CacheAttention` (`attend_tree_head`).
static ffi::Error TreeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                                ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                                ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> start,
                                ffi::Buffer<ffi::S8> rows, ffi::ResultBuffer<ffi::F32> out) {
  Operands o;
  if (auto e = read_operands("tree_attention", q, k, v, layer, out, o); e.failure()) return e;
  const Shape d = o.d;
  auto sd = start.dimensions(), rd = rows.dimensions();
  if (sd.size() != 1 || rd.size() != 3 || sd[0] != d.B || rd[0] != d.B || rd[1] != d.T)
    return ffi::Error::InvalidArgument("tree_attention: start must be [B], rows [B, T, W]");
  const int64_t W = rd[2];
  const int32_t* st = start.typed_data();
  const int8_t* rp = rows.typed_data();
  int64_t slots = 0;
  for (int64_t b = 0; b < d.B; ++b)
    slots += std::min<int64_t>(std::max<int64_t>((int64_t)st[b] + W, 0), d.S) * d.T * d.G;
  for_each_head(pool, d, slots, [=](int64_t b, int64_t g, std::vector<float>& w,
                                    std::vector<int32_t>& idx) {
    attend_tree_head(d, W, o.q, o.kl, o.vl, st, rp, o.out, b, g, o.scale, w, idx);
  });
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsimTreeAttention, TreeAttention,
                              attention_binding()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
