/* 4-bit and 8-bit weights, against fp32 rows (linear_q4, linear_q8) and, in AVX512-VNNI builds, against rows
 * rounded to 8 bits (linear_q4a8_ld, linear_q8a8_ld, linear_q8a8_map).
 *
 * W in groups of 32 along K, as GGUF keeps them:
 * - Q4_1 (linear_q4): per output row n and group g, 16 bytes of nibbles (element j of the group is the low
 *   nibble of byte j, element j + 16 its high nibble), a scale d[n, g] and a low end m[n, g], w = d q + m;
 * - Q8_0 (linear_q8): 32 signed bytes and a scale d[n, g], w = d q.
 * Scales and low ends are fp32 (GGUF's fp16 values are exact in fp32). Each weight is made in registers,
 * w = fma(q, d, m) (or d q): one rounding of d q + m, whose product d q is exact, so w is bit for bit the
 * fp32 weight a dequantizing reader computes (d * q + m in fp32). The weights are made once per group and
 * used by every row of the block, and each row is summed exactly as the fp32 kernel sums it (LANES lanes
 * along K, then the same fold): on weights equal to the dequantized groups, linear_q4 and linear_q8 give
 * linear_f32's results bit for bit, and they are row-invariant like it. */
#include "rowinv.h"

#define QV (QG / LANES) /* vectors per group */
#if defined(__AVX512F__)
/* A group's 16 possible weights fma(j, d, m), j = 0..15, in one register; each weight is then looked up by
 * its nibble (vpermps reads the low 4 bits of each index: the low nibble needs no mask). The same values
 * as fma(q, d, m) lane by lane, in 5 instructions a group instead of 9. */
static inline void make_q4(const uint8_t *b, const float *dm, vec w[QV]) {
  const vec iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  vec table = vfmadd(iota, vset1(dm[0]), vset1(dm[1]));
  __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b));
  w[0] = _mm512_permutexvar_ps(bytes, table);
  w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
}
static inline void make_q8(const uint8_t *b, const float *d, vec w[QV]) {
  vec dv = vset1(d[0]);
  w[0] = vmul(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b))), dv);
  w[1] = vmul(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 16)))), dv);
}
#else
static inline void unpack_q4(const uint8_t *b, vec q[QV]) { /* bytes 0..7, then 8..15, widened to 32 bits */
  __m256i low = _mm256_set1_epi32(0x0F);
  __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b));
  __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + 8)));
  q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, low));
  q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(c, low));
  q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
  q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(c, 4));
}
static inline void unpack_q8(const uint8_t *b, vec q[QV]) {
  for (int c = 0; c < QV; c++) q[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 8 * c))));
}
static inline void make_q4(const uint8_t *b, const float *dm, vec w[QV]) {
  unpack_q4(b, w);
  vec dv = vset1(dm[0]), mv = vset1(dm[1]);
  for (int c = 0; c < QV; c++) w[c] = vfmadd(w[c], dv, mv);
}
static inline void make_q8(const uint8_t *b, const float *d, vec w[QV]) {
  unpack_q8(b, w);
  vec dv = vset1(d[0]);
  for (int c = 0; c < QV; c++) w[c] = vmul(w[c], dv);
}
#endif

/* MM input rows against 4 output rows n0..n0+3: integers wq[g, j, GB bytes] (the block's 4 rows interleaved
 * group by group, so the weights stream in one sequential read); per group the block's scales (and low
 * ends) ds: [G, 4, S] (S = 2: (d, m) for Q4_1; S = 1: d for Q8_0); y[i * N + j] gets row i, output n0 + j
 * (j < nn). */
/* Bytes of integer weights prefetched ahead (their scales a quarter as far), as the blocked fp32 kernel prefetches
 * its own: without, 4-bit layers and the 8-bit head on fp32 activations waited on memory (SmolLM2 in int4, a plain
 * pass 15.9 -> 10.9 ms, `pass-cost --precisions int4 --threads 1`; 1024 to 8192 bytes within noise of each other) */
#ifndef Q_AHEAD
#define Q_AHEAD 4096
#endif
#define DEFINE_QBLOCK(T, MM, GB, S)                                                                    \
  static void T##_##MM(const float *x, int64_t K, const uint8_t *wq, const float *ds, int64_t G, float *y, \
                       int64_t N, int64_t nn) {                                                        \
    vec acc[MM][NB];                                                                                   \
    UNROLLED for (int i = 0; i < MM; i++)                                                              \
      UNROLLED for (int j = 0; j < NB; j++) acc[i][j] = vzero();                                       \
    for (int64_t g = 0; g < G; g++) {                                                                  \
      const float *dg = ds + g * (S) * NB;                                                             \
      const uint8_t *wg = wq + g * NB * (GB);                                                          \
      UNROLLED for (int f = 0; f < NB * (GB); f += 64) {                                               \
        _mm_prefetch((const char *)wg + Q_AHEAD + f, _MM_HINT_T0);                                     \
        if (L2_AHEAD) _mm_prefetch((const char *)wg + L2_AHEAD + f, _MM_HINT_T1);                      \
      }                                                                                                \
      _mm_prefetch((const char *)dg + Q_AHEAD / 4, _MM_HINT_T0);                                       \
      vec w[NB][QV];                                                                                   \
      UNROLLED for (int j = 0; j < NB; j++) make_##T(wq + (g * NB + j) * (GB), dg + (S) * j, w[j]);    \
      UNROLLED for (int i = 0; i < MM; i++) {                                                          \
        const float *xp = x + i * K + g * QG;                                                          \
        UNROLLED for (int c = 0; c < QV; c++) {                                                        \
          vec xv = load_x(xp + c * LANES, LANES);                                                      \
          UNROLLED for (int j = 0; j < NB; j++) acc[i][j] = vfmadd(xv, w[j][c], acc[i][j]);            \
        }                                                                                              \
      }                                                                                                \
    }                                                                                                  \
    STORE_TOTALS(MM, acc, y, N, 0, nn)                                                                 \
  }
#define DEFINE_QBLOCKS(T, GB, S)                                                                       \
  DEFINE_QBLOCK(T, 1, GB, S) DEFINE_QBLOCK(T, 2, GB, S) DEFINE_QBLOCK(T, 3, GB, S)                     \
  DEFINE_QBLOCK(T, 4, GB, S) DEFINE_QBLOCK(T, 5, GB, S) DEFINE_QBLOCK(T, 6, GB, S)                     \
  RI_HIDDEN const q_fn T##_blocks[7] = {0, T##_1, T##_2, T##_3, T##_4, T##_5, T##_6};
DEFINE_QBLOCKS(q4, QG / 2, 2)
DEFINE_QBLOCKS(q8, QG, 1)

/* y[M, N] = x[M, K] W^T for grouped-integer W (above): wq [Np / 4, K / 32, 4, GB] integers, ds [Np / 4, K / 32, 4, S]
 * scales (and low ends), Np = N rounded up to a multiple of 4 (padding rows are computed, not stored). K a
 * multiple of 32. */
RI_HIDDEN void linear_q(const q_fn *blocks, int64_t GB, int64_t S, const float *x, int64_t M, int64_t K,
                        const uint8_t *wq, const float *ds, int64_t N, float *y, int64_t ldy, int threads) {
  int64_t G = K / QG, nblocks = (N + NB - 1) / NB;
  _Pragma("omp parallel for schedule(static) num_threads(threads)")
  for (int64_t b = 0; b < nblocks; b++) {
    int64_t n0 = b * NB, nn = N - n0 < NB ? N - n0 : NB;
    for (int64_t m0 = 0; m0 < M; m0 += MBQ) {
      int64_t mm = M - m0 < MBQ ? M - m0 : MBQ;
      blocks[mm](x + m0 * K, K, wq + n0 * G * GB, ds + b * G * NB * S, G, y + m0 * ldy + n0, ldy, nn);
    }
  }
}

void linear_q4(const float *x, int64_t M, int64_t K, const uint8_t *wq, const float *dm, int64_t N, float *y,
               int threads) {
  linear_q(q4_blocks, QG / 2, 2, x, M, K, wq, dm, N, y, N, threads);
}

void linear_q8(const float *x, int64_t M, int64_t K, const uint8_t *wq, const float *d, int64_t N, float *y,
               int threads) {
  linear_q(q8_blocks, QG, 1, x, M, K, wq, d, N, y, N, threads);
}

/* ---- 4-bit weights against 8-bit activations (AVX512-VNNI builds: linear_q4a8) -----------------------
 * The arithmetic of llama.cpp's Q4_1 x Q8 dot products, row-invariant: each input row is rounded to 8 bits
 * per group of 32 (xq = round(x / dx), dx = max |x| / 127), and for output n, group g
 *   y[n] += dw[n, g] dx[g] S + mw[n, g] sx[g],  S = sum_j q[n, j] xq[j] (exact, in 32-bit integers), sx = dx sum_j xq[j],
 * two fmas a group, in group order, whatever the other rows of the call: so a row's result does not depend
 * on them, and speculative passes compute their main rows bit for bit as plain passes. The products run 64
 * at a time (vpdpbusd), across 16 outputs: a row costs about a quarter of its fp32 multiply-adds, and up to 4
 * rows cost little more than one (the weights' reads bound them).
 * Layout: w [N / 16, G, 4, 64]: per tile of 16 outputs and group, chunk c's byte 4 o + k holds q[o][8c + k] in
 * its low nibble and q[o][8c + 4 + k] in its high one; dm [N / 16, G, 2, 16] fp16 (Q4_1's own, exact in fp32):
 * the tile's dw, then its mw. */
#if defined(__AVX512F__)
/* Rows [m0, m0 + rows) of `width` outputs (a multiple of 16) from column n0, held in buf (row stride lb), written
 * out: rows below `split` to y at the columns cols[n0 ..] names, the others to y2 in order (the merged head). */
RI_HIDDEN void scatter_cols(const float *buf, int64_t lb, int64_t m0, int rows, int width, int64_t n0,
                            const int32_t *cols, int64_t split, float *y, int64_t ldy, float *y2, int64_t ld2) {
  for (int r = 0; r < rows; r++) {
    int64_t m = m0 + r;
    for (int h = 0; h < width; h += 16) {
      __m512 a = _mm512_loadu_ps(buf + r * lb + h);
      if (m < split) _mm512_i32scatter_ps(y + m * ldy, _mm512_loadu_si512(cols + n0 + h), a, 4);
      else _mm512_storeu_ps(y2 + (m - split) * ld2 + n0 + h, a);
    }
  }
}
#endif
#if defined(__AVX512VNNI__)
#define A8_TILE 16
static inline __m512 half16(const uint16_t *h) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)); }
#define A8_ROWS 8 /* input rows per block */
static void quantize_q8(const float *x, int64_t M, int64_t K, int8_t *xq, float *dx, float *sx) {
  int64_t G = K / QG;
  for (int64_t m = 0; m < M; m++)
    for (int64_t g = 0; g < G; g++) {
      const float *p = x + m * K + g * QG;
      __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
      float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
      __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));
      __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
      _mm_storeu_si128((__m128i *)(xq + m * K + g * QG), _mm512_cvtsepi32_epi8(qa));
      _mm_storeu_si128((__m128i *)(xq + m * K + g * QG + 16), _mm512_cvtsepi32_epi8(qb));
      dx[m * G + g] = d;
      sx[m * G + g] = d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
    }
}

/* MM rows against one tile of 16 outputs; y[i * ldy + o]. The weights 8 groups ahead are prefetched: without,
 * the loads and the products took turns (streaming 55 MB of a 576 x 1,536 layer's weights, 4 rows cost 1.3x
 * one row; with, 1.1x). One tile a block: two or four tiles a block for fewer rows measured slower. */
#define A8_AHEAD 2048
#define DEFINE_A8BLOCK(MM)                                                                                \
  static void a8_##MM(const int8_t *xq, const float *dx, const float *sx, int64_t K, const uint8_t *w,    \
                      const uint16_t *dm, int64_t G, float *y, int64_t ldy) {                             \
    const __m512i low = _mm512_set1_epi8(0x0F);                                                           \
    __m512 f[MM];                                                                                         \
    UNROLLED for (int i = 0; i < MM; i++) f[i] = vzero();                                                 \
    for (int64_t g = 0; g < G; g++) {                                                                     \
      const uint8_t *wg = w + g * 4 * 64;                                                                 \
      UNROLLED for (int c = 0; c < 4; c++) _mm_prefetch((const char *)wg + A8_AHEAD + c * 64, _MM_HINT_T0); \
      if (L2_AHEAD) UNROLLED for (int c = 0; c < 4; c++) _mm_prefetch((const char *)wg + L2_AHEAD + c * 64, _MM_HINT_T1); \
      __m512i acc[MM];                                                                                    \
      UNROLLED for (int i = 0; i < MM; i++) acc[i] = _mm512_setzero_si512();                              \
      UNROLLED for (int c = 0; c < 4; c++) {                                                              \
        __m512i v = _mm512_loadu_si512(wg + c * 64);                                                      \
        __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);       \
        UNROLLED for (int i = 0; i < MM; i++) {                                                           \
          int32_t xa, xb;                                                                                 \
          memcpy(&xa, xq + i * K + g * QG + 8 * c, 4), memcpy(&xb, xq + i * K + g * QG + 8 * c + 4, 4);   \
          acc[i] = _mm512_dpbusd_epi32(acc[i], lo, _mm512_set1_epi32(xa));                                \
          acc[i] = _mm512_dpbusd_epi32(acc[i], hi, _mm512_set1_epi32(xb));                                \
        }                                                                                                 \
      }                                                                                                   \
      __m512 dv = half16(dm + g * 2 * A8_TILE), mv = half16(dm + g * 2 * A8_TILE + A8_TILE);             \
      UNROLLED for (int i = 0; i < MM; i++) {                                                             \
        f[i] = vfmadd(_mm512_cvtepi32_ps(acc[i]), vmul(dv, vset1(dx[i * G + g])), f[i]);                  \
        f[i] = vfmadd(mv, vset1(sx[i * G + g]), f[i]);                                                    \
      }                                                                                                   \
    }                                                                                                     \
    UNROLLED for (int i = 0; i < MM; i++) _mm512_storeu_ps(y + i * ldy, f[i]);                            \
  }
typedef void (*a8_fn)(const int8_t *, const float *, const float *, int64_t, const uint8_t *, const uint16_t *, int64_t,
                      float *, int64_t);
DEFINE_A8BLOCK(1) DEFINE_A8BLOCK(2) DEFINE_A8BLOCK(3) DEFINE_A8BLOCK(4)
DEFINE_A8BLOCK(5) DEFINE_A8BLOCK(6) DEFINE_A8BLOCK(7) DEFINE_A8BLOCK(8)
static const a8_fn a8_blocks[A8_ROWS + 1] = {0, a8_1, a8_2, a8_3, a8_4, a8_5, a8_6, a8_7, a8_8};
/* A prompt's rows (WIDE_ROWS or more) two tiles at a time, up to 6 rows a block: each broadcast of a row's bytes
 * feeds both tiles' products (one broadcast a product above), and each output gets the same integer sums and the same
 * two fmas a group as in a8_MM: the same results bit for bit. SmolLM2's shapes at 202 rows (ad-hoc, GOP/s, one tile
 * -> two): 576 -> 576 348 -> 372, 576 -> 1536 345 -> 380, 1536 -> 576 326 -> 362, 576 -> 192 286 -> 300. Written out
 * beside DEFINE_A8BLOCK rather than as one macro over T tiles: that one (same sums) took 2-3 % longer on prompts. */
#define A8_WIDE_ROWS 6
#define DEFINE_A8PAIR(MM)                                                                                 \
  static void a8pair_##MM(const int8_t *xq, const float *dx, const float *sx, int64_t K, const uint8_t *w, \
                          const uint16_t *dm, int64_t G, float *y, int64_t ldy) {                         \
    const __m512i low = _mm512_set1_epi8(0x0F);                                                           \
    const uint8_t *w2 = w + G * 4 * 64;                                                                   \
    const uint16_t *dm2 = dm + G * 2 * A8_TILE;                                                           \
    __m512 f[MM][2];                                                                                      \
    UNROLLED for (int i = 0; i < MM; i++) f[i][0] = vzero(), f[i][1] = vzero();                           \
    for (int64_t g = 0; g < G; g++) {                                                                     \
      const uint8_t *wg = w + g * 4 * 64, *wg2 = w2 + g * 4 * 64;                                         \
      __m512i acc[MM][2];                                                                                 \
      UNROLLED for (int i = 0; i < MM; i++) acc[i][0] = _mm512_setzero_si512(), acc[i][1] = _mm512_setzero_si512(); \
      UNROLLED for (int c = 0; c < 4; c++) {                                                              \
        __m512i v = _mm512_loadu_si512(wg + c * 64), v2 = _mm512_loadu_si512(wg2 + c * 64);               \
        __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);       \
        __m512i lo2 = _mm512_and_si512(v2, low), hi2 = _mm512_and_si512(_mm512_srli_epi16(v2, 4), low);   \
        UNROLLED for (int i = 0; i < MM; i++) {                                                           \
          int32_t xa, xb;                                                                                 \
          memcpy(&xa, xq + i * K + g * QG + 8 * c, 4), memcpy(&xb, xq + i * K + g * QG + 8 * c + 4, 4);   \
          __m512i ba = _mm512_set1_epi32(xa), bb = _mm512_set1_epi32(xb);                                 \
          acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], lo, ba);                                             \
          acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], lo2, ba);                                            \
          acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], hi, bb);                                             \
          acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], hi2, bb);                                            \
        }                                                                                                 \
      }                                                                                                   \
      __m512 dv = half16(dm + g * 2 * A8_TILE), mv = half16(dm + g * 2 * A8_TILE + A8_TILE);             \
      __m512 dv2 = half16(dm2 + g * 2 * A8_TILE), mv2 = half16(dm2 + g * 2 * A8_TILE + A8_TILE);         \
      UNROLLED for (int i = 0; i < MM; i++) {                                                             \
        f[i][0] = vfmadd(_mm512_cvtepi32_ps(acc[i][0]), vmul(dv, vset1(dx[i * G + g])), f[i][0]);         \
        f[i][0] = vfmadd(mv, vset1(sx[i * G + g]), f[i][0]);                                              \
        f[i][1] = vfmadd(_mm512_cvtepi32_ps(acc[i][1]), vmul(dv2, vset1(dx[i * G + g])), f[i][1]);        \
        f[i][1] = vfmadd(mv2, vset1(sx[i * G + g]), f[i][1]);                                             \
      }                                                                                                   \
    }                                                                                                     \
    UNROLLED for (int i = 0; i < MM; i++) {                                                               \
      _mm512_storeu_ps(y + i * ldy, f[i][0]);                                                             \
      _mm512_storeu_ps(y + i * ldy + A8_TILE, f[i][1]);                                                   \
    }                                                                                                     \
  }
DEFINE_A8PAIR(1) DEFINE_A8PAIR(2) DEFINE_A8PAIR(3) DEFINE_A8PAIR(4) DEFINE_A8PAIR(5) DEFINE_A8PAIR(6)
static const a8_fn a8_pairs[A8_WIDE_ROWS + 1] = {0, a8pair_1, a8pair_2, a8pair_3, a8pair_4, a8pair_5, a8pair_6};

/* cols NULL: y[m, n] (row stride ldy); else `scatter_cols` */
static int linear_a8(const a8_fn *blocks, int64_t GB, const float *x, int64_t M, int64_t K, const uint8_t *w,
                     const uint16_t *dm, int64_t N, float *y, int64_t ldy, const int32_t *cols, int64_t split,
                     float *y2, int64_t ld2, int threads) {
  int64_t G = K / QG, tiles = N / A8_TILE;
  int8_t *xq = KEPT(int8_t, M * K);
  float *dx = KEPT(float, M * G), *sx = KEPT(float, M * G);
  int failed = !xq || !dx || !sx;
  if (!failed) {
    quantize_q8(x, M, K, xq, dx, sx);
    int64_t paired = blocks == a8_blocks && !cols && M >= WIDE_ROWS ? tiles / 2 * 2 : 0; /* a prompt: `a8_pairs` */
    _Pragma("omp parallel for schedule(static) num_threads(threads)")
    for (int64_t t = 0; t < paired; t += 2)
      for (int64_t m0 = 0; m0 < M; m0 += A8_WIDE_ROWS) {
        int mm = M - m0 < A8_WIDE_ROWS ? (int)(M - m0) : A8_WIDE_ROWS;
        a8_pairs[mm](xq + m0 * K, dx + m0 * G, sx + m0 * G, K, w + t * G * GB, dm + t * G * 2 * A8_TILE, G,
                     y + m0 * ldy + t * A8_TILE, ldy);
      }
    /* the rows in blocks of even size (9 rows: 4 + 5, not 8 + 1; 25: 6 + 6 + 6 + 7): a block's weights are unpacked
     * once for all its rows, so a one-row tail paid that again for one row. Each row's sums are the same in any block. */
    const int64_t blocks_of_rows = (M + A8_ROWS - 1) / A8_ROWS;
    _Pragma("omp parallel for schedule(static) num_threads(threads)")
    for (int64_t t = paired; t < tiles; t++)
      for (int64_t b = 0, m0 = 0, mm = 0; b < blocks_of_rows; b++, m0 += mm) {
        mm = (M - m0) / (blocks_of_rows - b);
        float buf[A8_ROWS * A8_TILE];
        blocks[mm](xq + m0 * K, dx + m0 * G, sx + m0 * G, K, w + t * G * GB, dm + t * G * 2 * A8_TILE, G,
                   cols ? buf : y + m0 * ldy + t * A8_TILE, cols ? A8_TILE : ldy);
        if (cols) scatter_cols(buf, A8_TILE, m0, mm, A8_TILE, t * A8_TILE, cols, split, y, ldy, y2, ld2);
      }
  }
  return failed ? RI_NO_MEMORY : RI_OK;
}
/* An 8-bit head against 8-bit activations (GGUF's Q8_0 x Q8): signed weights w[n, j] (w = dw q), so the
 * activations take the unsigned side of vpdpbusd, xq + 128, and the 128 sum_j q[n, j] that adds is taken off
 * in integers: y[n] += dw dx (S - 128 sum_j q[n, j]), S = sum_j q (xq + 128), all exact until the one
 * conversion. Layout: w [N / 16, G, 8, 64] (chunk c's byte 4 o + k: q[o][4c + k]); dm [N / 16, G, 2, 16]
 * 16-bit: dw (fp16, Q8_0's own), then sum_j q[n, j] (int16). */
#define DEFINE_Q8A8BLOCK(MM)                                                                              \
  static void q8a8_##MM(const int8_t *xq, const float *dx, const float *sx, int64_t K, const uint8_t *w,  \
                        const uint16_t *dm, int64_t G, float *y, int64_t ldy) {                           \
    (void)sx;                                                                                             \
    __m512 f[MM];                                                                                         \
    UNROLLED for (int i = 0; i < MM; i++) f[i] = vzero();                                                 \
    for (int64_t g = 0; g < G; g++) {                                                                     \
      const uint8_t *wg = w + g * 8 * 64;                                                                 \
      UNROLLED for (int c = 0; c < 8; c++) _mm_prefetch((const char *)wg + 2 * A8_AHEAD + c * 64, _MM_HINT_T0); \
      if (L2_AHEAD) UNROLLED for (int c = 0; c < 8; c++) _mm_prefetch((const char *)wg + L2_AHEAD + c * 64, _MM_HINT_T1); \
      __m512i acc[MM];                                                                                    \
      UNROLLED for (int i = 0; i < MM; i++) acc[i] = _mm512_setzero_si512();                              \
      UNROLLED for (int c = 0; c < 8; c++) {                                                              \
        __m512i v = _mm512_loadu_si512(wg + c * 64);                                                      \
        UNROLLED for (int i = 0; i < MM; i++) {                                                           \
          uint32_t xa;                                                                                    \
          memcpy(&xa, xq + i * K + g * QG + 4 * c, 4);                                                    \
          acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi32((int)(xa ^ 0x80808080u)), v);            \
        }                                                                                                 \
      }                                                                                                   \
      __m512 dv = half16(dm + g * 2 * A8_TILE);                                                           \
      __m512i excess = _mm512_slli_epi32(                                                                 \
          _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(dm + g * 2 * A8_TILE + A8_TILE))), 7); \
      UNROLLED for (int i = 0; i < MM; i++)                                                               \
        f[i] = vfmadd(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], excess)), vmul(dv, vset1(dx[i * G + g])), f[i]); \
    }                                                                                                     \
    UNROLLED for (int i = 0; i < MM; i++) _mm512_storeu_ps(y + i * ldy, f[i]);                            \
  }
DEFINE_Q8A8BLOCK(1) DEFINE_Q8A8BLOCK(2) DEFINE_Q8A8BLOCK(3) DEFINE_Q8A8BLOCK(4)
DEFINE_Q8A8BLOCK(5) DEFINE_Q8A8BLOCK(6) DEFINE_Q8A8BLOCK(7) DEFINE_Q8A8BLOCK(8)
static const a8_fn q8a8_blocks[A8_ROWS + 1] = {0, q8a8_1, q8a8_2, q8a8_3, q8a8_4, q8a8_5, q8a8_6, q8a8_7, q8a8_8};

/* y[m * ldy + n] = x[M, K] W^T, N a multiple of 16, K of 32: W 4-bit (linear_q4a8_ld) or 8-bit (linear_q8a8_ld)
 * in the layouts above. RI_OK, or RI_NO_MEMORY; RI_NO_FEATURE in builds without AVX512-VNNI. */
int linear_q4a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  return linear_a8(a8_blocks, 4 * 64, x, M, K, w, (const uint16_t *)dm, N, y, ldy, NULL, 0, NULL, 0, threads);
}
int linear_q8a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  return linear_a8(q8a8_blocks, 8 * 64, x, M, K, w, (const uint16_t *)dm, N, y, ldy, NULL, 0, NULL, 0, threads);
}
/* The 8-bit head with its columns mapped (`scatter_cols`): the merged head of kernels/heads/merged_head.py */
int linear_q8a8_map(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                    int64_t ldy, const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  return linear_a8(q8a8_blocks, 8 * 64, x, M, K, w, (const uint16_t *)dm, N, y, ldy, cols, split, y2, ld2, threads);
}
int rowinv_a8(void) { return 1; }
#else
int linear_q4a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  (void)x, (void)M, (void)K, (void)w, (void)dm, (void)N, (void)y, (void)ldy, (void)threads;
  return RI_NO_FEATURE; /* not in this build */
}
int linear_q8a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  return linear_q4a8_ld(x, M, K, w, dm, N, y, ldy, threads);
}
int linear_q8a8_map(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                    int64_t ldy, const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  (void)x, (void)M, (void)K, (void)w, (void)dm, (void)N, (void)y, (void)ldy, (void)cols, (void)split, (void)y2;
  (void)ld2, (void)threads;
  return RI_NO_FEATURE;
}
int rowinv_a8(void) { return 0; }
#endif

/* ---- Rows of an 8-bit head as a tied token embedding reads them ---------------------------------------
 * out[i] = the fp32 weights of output row ids[i] of an 8-bit head in linear_q8a8's layout (w [N / 16, G, 8, 64]:
 * chunk c's byte 4 o + k holds q[o][4c + k]; dm [N / 16, G, 2, 16]: the fp16 scales, then the group sums): each
 * weight q * d in fp32, exact (an int8 times an fp16 scale widened to fp32), as the layout's unpacking and a float
 * multiply make it. stored: output row j's stored row, or NULL (stored in order). */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
  if (exp == 0x1Fu) bits = sign | 0x7F800000u | (man << 13);  /* inf, nan */
  else if (exp) bits = sign | ((exp + 112u) << 23) | (man << 13);
  else if (!man) bits = sign;                                  /* zero */
  else {                                                       /* subnormal: normalize */
    int shift = 0;
    while (!(man & 0x400u)) man <<= 1, shift++;
    bits = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
void embed_q8a8(const int64_t *ids, int64_t m, int64_t K, const int8_t *w, const uint16_t *dm, const int64_t *stored,
                float *out) {
  int64_t G = K / QG;
  for (int64_t i = 0; i < m; i++) {
    int64_t r = stored ? stored[ids[i]] : ids[i], t = r / 16, o = r % 16;
    for (int64_t g = 0; g < G; g++) {
      float d = half_to_float(dm[((t * G + g) * 2) * 16 + o]);
      const int8_t *q = w + ((t * G + g) * 8) * 64 + 4 * o;
      float *y = out + i * K + g * QG;
      for (int c = 0; c < 8; c++)
        for (int k = 0; k < 4; k++) y[4 * c + k] = (float)q[c * 64 + k] * d;
    }
  }
}
