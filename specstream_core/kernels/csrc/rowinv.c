/* Row-invariant small-batch Linears for the CPU: y[M,N] = x[M,K] W[N,K]^T, fp32 sums. Built for AVX-512
 * (16 lanes) where the compiler is told so (-mavx512f ...), else for AVX2 + FMA (8 lanes).
 *
 * Every output y[m][n] is summed in one fixed order (LANES lanes along K, then a fixed fold of the lanes),
 * whatever M is, whichever block row m falls in and however many threads run: a row's result does not
 * depend on the other rows of its call. Speculative decoding relies on it: a pass that verifies five
 * tokens computes each of them bit for bit as a one-token pass would. (The two builds sum in different
 * orders, so their results differ from each other; each is invariant on its own.)
 *
 * The weights stream from memory once per call (4 output rows at a time, up to MB input rows against
 * them from registers; further input rows find the block's weights in L1), so a few rows cost little
 * more than one: decoding is bound by reading weights.
 * W is fp32 (linear_f32) or bf16 (linear_bf16: half the bytes, widened to fp32 in registers). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NB 4 /* output rows per block */
/* The blocks' loops over rows, outputs and halves of a group are unrolled outright: a loop gcc keeps
 * (the stores of the sums, after the main loop) made it hold the accumulators in memory and store all of
 * them on every step of K (a 3-row block: 12 stores per group). Unrolled, they stay in registers: 3 rows of
 * SmolLM2's 4-bit layers 7.2 -> 5.9 ms, a 150-row prompt 298 -> 209 ms, the same sums bit for bit. */
#define UNROLLED _Pragma("GCC unroll 12")

#if defined(__AVX512F__)
#define LANES 16
#define MB 6 /* input rows per block: 6 x 4 accumulators + 4 weights + 1 input = 29 of 32 registers */
typedef __m512 vec;
#define vzero _mm512_setzero_ps
#define vfmadd _mm512_fmadd_ps
static inline __m128 fold(__m512 v) { /* 16 lanes -> 4: (l + l+8) + (l+4), the same for every output */
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
static inline __mmask16 lanes(int n) { return n == LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }
static inline vec load_x(const float *x, int n) { return _mm512_maskz_loadu_ps(lanes(n), x); }
static inline vec load_f32(const float *w, int n) { return _mm512_maskz_loadu_ps(lanes(n), w); }
static inline vec load_bf16(const uint16_t *w, int n) {
  __m256i h = _mm256_maskz_loadu_epi16(lanes(n), w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#else
#define LANES 8
#define MB 3 /* 3 x 4 accumulators + 4 weights + 1 input: 17 for 16 registers, yet on Zen 3 a 5-row bf16
              * call took 44 ms against 86 with 2 rows a block (SmolLM2's Linears, one thread) */
typedef __m256 vec;
#define vzero _mm256_setzero_ps
#define vfmadd _mm256_fmadd_ps
static inline __m128 fold(__m256 v) { /* 8 lanes -> 4: l + l+4, the same for every output */
  return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}
static inline __m256i lanes(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
static inline vec load_x(const float *x, int n) { return n == LANES ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, lanes(n)); }
static inline vec load_f32(const float *w, int n) { return load_x(w, n); }
static inline vec load_bf16(const uint16_t *w, int n) {
  __m128i h;
  if (n == LANES) {
    h = _mm_loadu_si128((const __m128i *)w);
  } else { /* the tail: no masked 16-bit load in AVX2 */
    uint16_t buf[LANES] = {0};
    memcpy(buf, w, (size_t)n * sizeof(uint16_t));
    h = _mm_loadu_si128((const __m128i *)buf);
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

static inline __m128 total4(vec a, vec b, vec c, vec d) { /* lane j: the sum of the j-th vector */
  __m128 r0 = fold(a), r1 = fold(b), r2 = fold(c), r3 = fold(d);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  return _mm_add_ps(_mm_add_ps(_mm_add_ps(r0, r1), r2), r3);
}

/* A block's sums stored: y[i * ldy + n0 + j] = total4(acc[i][0], .., acc[i][3])[j], rows i < MM, outputs j < nn. */
#if defined(__AVX512F__)
/* On AVX-512, four rows at a time with the same adds as total4 and a third of its shuffles (a prompt's Linears
 * spent ~1 in 6 of their vector instructions on total4's 27 a row at K = 576): fold4 folds 4 vectors with 512-bit
 * shuffles (lanes 4j..4j+3: fold of the j-th), totals4 transposes four rows' folds within each 128-bit lane and
 * adds them in total4's order (lane 4j + i: row i, output j). */
static inline __m512 fold4(__m512 a, __m512 b, __m512 c, __m512 d) {
  __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE)); /* l + l+8 */
  __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD)); /* + l+4 */
}
static inline __m512 totals4(__m512 r0, __m512 r1, __m512 r2, __m512 r3) {
  __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(r0, r1)), t1 = _mm512_castps_pd(_mm512_unpackhi_ps(r0, r1));
  __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(r2, r3)), t3 = _mm512_castps_pd(_mm512_unpackhi_ps(r2, r3));
  __m512 x0 = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)), x1 = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
  __m512 x2 = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)), x3 = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), x2), x3);
}
/* rows (1..4) rows of totals4's result t stored, each row's nn outputs (lane 4j + i -> y[i * ldy + j]) */
static inline void store_totals4(__m512 t, int rows, float *y, int64_t ldy, int64_t nn) {
  const __m512i by_row = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 p = _mm512_permutexvar_ps(by_row, t);
  __mmask8 m = (__mmask8)((1u << nn) - 1);
  _mm_mask_storeu_ps(y, m, _mm512_castps512_ps128(p));
  if (rows > 1) _mm_mask_storeu_ps(y + ldy, m, _mm512_extractf32x4_ps(p, 1));
  if (rows > 2) _mm_mask_storeu_ps(y + 2 * ldy, m, _mm512_extractf32x4_ps(p, 2));
  if (rows > 3) _mm_mask_storeu_ps(y + 3 * ldy, m, _mm512_extractf32x4_ps(p, 3));
}
#define FOLD_ROW(MM, acc, i) ((i) < (MM) ? fold4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]) : vzero())
#define STORE_TOTALS(MM, acc, y, ldy, n0, nn)                                                          \
  UNROLLED for (int i0_ = 0; i0_ < (MM); i0_ += 4)                                                     \
    store_totals4(totals4(FOLD_ROW(MM, acc, i0_), FOLD_ROW(MM, acc, i0_ + 1), FOLD_ROW(MM, acc, i0_ + 2), \
                          FOLD_ROW(MM, acc, i0_ + 3)),                                                 \
                  (MM) - i0_ < 4 ? (MM) - i0_ : 4, (y) + i0_ * (ldy) + (n0), ldy, nn);
#else
#define STORE_TOTALS(MM, acc, y, ldy, n0, nn)                                                          \
  UNROLLED for (int i_ = 0; i_ < (MM); i_++) {                                                         \
    float out_[NB];                                                                                    \
    _mm_storeu_ps(out_, total4(acc[i_][0], acc[i_][1], acc[i_][2], acc[i_][3]));                       \
    memcpy((y) + i_ * (ldy) + (n0), out_, (size_t)(nn) * sizeof(float));                              \
  }
#endif

#define STEP(MM, LOAD, k, n)                                                                           \
  {                                                                                                    \
    vec a = LOAD(w0 + (k), n), b = LOAD(w1 + (k), n), c = LOAD(w2 + (k), n), d = LOAD(w3 + (k), n);    \
    _mm_prefetch((const char *)(w0 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w1 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w2 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w3 + NB * K + (k)), _MM_HINT_T0);                                      \
    UNROLLED for (int i = 0; i < MM; i++) {                                                            \
      vec xv = load_x(x + i * K + (k), n);                                                             \
      acc[i][0] = vfmadd(xv, a, acc[i][0]);                                                            \
      acc[i][1] = vfmadd(xv, b, acc[i][1]);                                                            \
      acc[i][2] = vfmadd(xv, c, acc[i][2]);                                                            \
      acc[i][3] = vfmadd(xv, d, acc[i][3]);                                                            \
    }                                                                                                  \
  }

/* One block: MM input rows (a compile-time count, so the accumulators stay in registers) against nn <= 4
 * output rows starting at n0, whose weights start at W + n0 * K in either layout. LOOP(MM, WT, LOAD) runs
 * the k loop of one weight layout over acc; the zeroed accumulators and the stored sums are the same. */
#define DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, MM)                                                      \
  static void NAME##_##MM(const float *x, int64_t K, const WT *W, int64_t n0, int64_t nn, float *y,     \
                          int64_t N) {                                                                 \
    vec acc[MM][NB];                                                                                   \
    UNROLLED for (int i = 0; i < MM; i++)                                                              \
      UNROLLED for (int j = 0; j < NB; j++) acc[i][j] = vzero();                                       \
    LOOP(MM, WT, LOAD)                                                                                 \
    STORE_TOTALS(MM, acc, y, N, n0, nn)                                                                \
  }

/* Row-major weights: 4 reads K apart; missing output rows read row n0 again and are not stored. */
#define ROW_MAJOR_LOOP(MM, WT, LOAD)                                                                   \
  const WT *w0 = W + n0 * K, *w1 = w0 + (nn > 1) * K, *w2 = w0 + (nn > 2) * 2 * K,                    \
           *w3 = w0 + (nn > 3) * 3 * K;                                                                \
  int64_t k = 0;                                                                                       \
  for (; k + LANES <= K; k += LANES) STEP(MM, LOAD, k, LANES)                                          \
  if (k < K) STEP(MM, LOAD, k, (int)(K - k))

#if MB == 6
#define DEFINE_BLOCKS(LOOP, NAME, WT, LOAD)                                                            \
  DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 1) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 2) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 3) \
  DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 4) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 5) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 6) \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, int64_t);  \
  static const NAME##_fn NAME##_blocks[MB + 1] = {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4, NAME##_5, NAME##_6};
#else
#define DEFINE_BLOCKS(LOOP, NAME, WT, LOAD)                                                            \
  DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 1) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 2) DEFINE_BLOCK_OF(LOOP, NAME, WT, LOAD, 3) \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, int64_t);  \
  static const NAME##_fn NAME##_blocks[MB + 1] = {0, NAME##_1, NAME##_2, NAME##_3};
#endif

/* NAME##_ld writes row m of y at y + m * ldy (ldy >= N: a slice of a wider output); NAME is ldy = N. */
#define DEFINE_KERNEL(LOOP, NAME, WT, LOAD)                                                            \
  DEFINE_BLOCKS(LOOP, NAME, WT, LOAD)                                                                  \
  static void NAME##_ld(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int64_t ldy, \
                        int threads) {                                                                 \
    int64_t blocks = (N + NB - 1) / NB;                                                                \
    _Pragma("omp parallel for schedule(static) num_threads(threads)")                                  \
    for (int64_t b = 0; b < blocks; b++) {                                                             \
      int64_t n0 = b * NB, nn = N - n0 < NB ? N - n0 : NB;                                             \
      for (int64_t m0 = 0; m0 < M; m0 += MB) {                                                         \
        int64_t mm = M - m0 < MB ? M - m0 : MB;                                                        \
        NAME##_blocks[mm](x + m0 * K, K, W, n0, nn, y + m0 * ldy, ldy);                               \
      }                                                                                                \
    }                                                                                                  \
  }                                                                                                    \
  void NAME(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int threads) {    \
    NAME##_ld(x, M, K, W, N, y, N, threads);                                                           \
  }

DEFINE_KERNEL(ROW_MAJOR_LOOP, linear_f32, float, load_f32)
DEFINE_KERNEL(ROW_MAJOR_LOOP, linear_bf16, uint16_t, load_bf16)

/* ---- blocked weights ------------------------------------------------------------------------------------
 * The same products and sums as linear_f32 / linear_bf16 (bit for bit), on weights laid out in blocks, so that
 * a call reads them as one sequential stream, prefetched PF_BYTES ahead:
 *   K in spans of span_of(K) columns (the last one shorter), Wb[span][N' / 4][span length / LANES][4][LANES]
 * (N' = N rounded up to a multiple of 4; padding rows are computed, not stored; K a multiple of LANES). The input
 * rows are loaded once a step (KEEP: on AVX-512 gcc otherwise folds each into all 4 of its FMAs, 4 loads for 1).
 * SmolLM2's 120 layer matrices in fp32, one thread, against the row-major kernel: 1 row -13 %, 6 rows -20 %.
 * A call of up to MB rows runs span by span, all blocks of a span in turn, each block's accumulators parked in
 * memory between spans: every accumulator gets the same FMAs in the same order as in one sweep of K, so the same
 * sums. The point is the inputs: one span of the rows stays in L1 while the weights stream past. Without spans
 * SmolLM2's down projection (K = 1536) at 5 rows, 30 KB of inputs beside the weights in flight, overflowed the
 * 48 KB L1 of this AMD EPYC: 141 us against 112 at one row; in spans of 384, 107 us (an ad-hoc A/B of 30 such
 * matrices, same sums). More rows (a prompt) go block by block, each block's spans in turn, parked on the stack. */
#define PF_BYTES 8192
#ifndef L2_AHEAD /* bytes ahead the weights are also prefetched into L2 (0: not); the build sets it per CPU vendor */
#define L2_AHEAD 0 /* (builder.py: 16384 on Intel; blocked fp32/bf16 and the 8-bit-activation kernels) */
#endif
#define KSPAN 384
/* Calls of WIDE_ROWS rows or more (a prompt) run a panel of PANEL blocks at a time, each group of MB rows against
 * the panel's blocks in turn: the group's inputs stay in L1 across the panel and the panel's weights in L2 across
 * the groups; the weights are not prefetched (they are read again from L2, not streamed). The same FMAs on every
 * accumulator in the same order, so the same sums. SmolLM2's shapes, a 202-row prompt, one thread, on the Xeon
 * of the eighteenth session (ad-hoc, GFLOP/s): 576 -> 1536 114 -> 131, 1536 -> 576 84 -> 117, 576 -> 576 118 -> 138. */
#define WIDE_ROWS 32
#define PANEL 16
static inline int64_t span_of(int64_t K) { return K > 2 * KSPAN ? KSPAN : K; }
int64_t rowinv_span(int64_t K) { return span_of(K); }
#if defined(__AVX512F__)
#define KEEP(v) __asm__("" : "+v"(v))
#define park_load _mm512_loadu_ps
#define park_store _mm512_storeu_ps
#else
#define KEEP(v) ((void)0)
#define park_load _mm256_loadu_ps
#define park_store _mm256_storeu_ps
#endif
#define PARKED (MB * NB * LANES) /* floats a block's accumulators take */
#define STEP_B(MM, WT, LOAD, k, PF)                                                                    \
  {                                                                                                    \
    const WT *p = wb + (k) * NB;                                                                       \
    vec a = LOAD(p, LANES), b = LOAD(p + LANES, LANES), c = LOAD(p + 2 * LANES, LANES),                \
        d = LOAD(p + 3 * LANES, LANES);                                                                \
    if (PF) UNROLLED for (int f = 0; f < (int)(NB * LANES * sizeof(WT)); f += 64) {                    \
      _mm_prefetch((const char *)p + PF_BYTES + f, _MM_HINT_T0);                                       \
      if (L2_AHEAD) _mm_prefetch((const char *)p + L2_AHEAD + f, _MM_HINT_T1);                         \
    }                                                                                                  \
    UNROLLED for (int i = 0; i < MM; i++) {                                                            \
      vec xv = load_x(x + i * K + (k), LANES);                                                         \
      KEEP(xv);                                                                                        \
      acc[i][0] = vfmadd(xv, a, acc[i][0]);                                                            \
      acc[i][1] = vfmadd(xv, b, acc[i][1]);                                                            \
      acc[i][2] = vfmadd(xv, c, acc[i][2]);                                                            \
      acc[i][3] = vfmadd(xv, d, acc[i][3]);                                                            \
    }                                                                                                  \
  }

/* Columns k0 .. k1 of one block: MM input rows against the nn <= 4 output rows from n0, whose weights for these
 * columns start at ws. The accumulators start at zero (k0 = 0) or where `park` left them; they are parked again
 * (k1 < K) or folded and stored. */
#define DEFINE_SPAN_OF(NAME, WT, LOAD, MM, PF)                                                         \
  static void NAME##_##MM(const float *x, int64_t K, const WT *ws, int64_t k0, int64_t k1, float *park, \
                          float *y, int64_t ldy, int64_t n0, int64_t nn) {                             \
    vec acc[MM][NB];                                                                                   \
    UNROLLED for (int i = 0; i < MM; i++)                                                              \
      UNROLLED for (int j = 0; j < NB; j++) acc[i][j] = k0 ? park_load(park + (i * NB + j) * LANES) : vzero(); \
    const WT *wb = ws - k0 * NB;                                                                       \
    for (int64_t k = k0; k < k1; k += LANES) STEP_B(MM, WT, LOAD, k, PF)                               \
    if (k1 < K) {                                                                                      \
      UNROLLED for (int i = 0; i < MM; i++)                                                            \
        UNROLLED for (int j = 0; j < NB; j++) park_store(park + (i * NB + j) * LANES, acc[i][j]);      \
      return;                                                                                          \
    }                                                                                                  \
    STORE_TOTALS(MM, acc, y, ldy, n0, nn)                                                              \
  }

/* All of K for one block, span after span, the accumulators kept in registers throughout: MM input rows against the
 * nn <= 4 output rows from n0 = b * NB of a weight W with `blocks` blocks, laid out in spans of `span` columns. The
 * same FMAs in the same order as span by span with parking, without storing and reloading the accumulators
 * between spans (a prompt's 1536 -> 576 Linear spent ~1 in 12 of its instructions parking). */
#define DEFINE_WHOLE_OF(NAME, WT, LOAD, MM, PF)                                                        \
  static void NAME##_##MM(const float *x, int64_t K, const WT *W, int64_t blocks, int64_t b, int64_t span, \
                          float *y, int64_t ldy, int64_t nn) {                                         \
    vec acc[MM][NB];                                                                                   \
    UNROLLED for (int i = 0; i < MM; i++)                                                              \
      UNROLLED for (int j = 0; j < NB; j++) acc[i][j] = vzero();                                       \
    for (int64_t k0 = 0; k0 < K; k0 += span) {                                                         \
      int64_t k1 = k0 + span < K ? k0 + span : K;                                                      \
      const WT *wb = W + k0 * blocks * NB + b * NB * (k1 - k0) - k0 * NB;                              \
      for (int64_t k = k0; k < k1; k += LANES) STEP_B(MM, WT, LOAD, k, PF)                             \
    }                                                                                                  \
    STORE_TOTALS(MM, acc, y, ldy, b * NB, nn)                                                          \
  }

/* A thread's buffer of at least `bytes` (grown, kept for the thread's next calls), or NULL */
typedef struct {
  void *buf;
  size_t cap;
} kept_buffer;
static void *at_least(kept_buffer *k, size_t bytes) {
  if (bytes > k->cap) {
    void *grown = realloc(k->buf, bytes);
    if (!grown) return NULL;
    k->buf = grown, k->cap = bytes;
  }
  return k->buf;
}
/* A scratch array of n T's kept by this thread for this call site (grown, never freed), or NULL. Each expansion
 * has its own. A pass's ~600 buffers from malloc and free took ~2 % of an int4-a8 decoding's time (perf); kept,
 * the plain loop ran 1.01x and speculative streaming 1.02x (kernel_ab, 32 prompts). */
#define KEPT(T, n) ((T *)({                                                                                \
  static __thread kept_buffer kept_;                                                                   \
  at_least(&kept_, (size_t)(n) * sizeof(T));                                                           \
}))
/* A thread's parking for `floats`, or NULL */
static float *parking(size_t floats) {
  static __thread kept_buffer k;
  return at_least(&k, floats * sizeof(float));
}

#if MB == 6
#define SPAN_BLOCKS(NAME) {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4, NAME##_5, NAME##_6}
#define DEFINE_SPANS(DEF, NAME, WT, LOAD, PF)                                                          \
  DEF(NAME, WT, LOAD, 1, PF) DEF(NAME, WT, LOAD, 2, PF) DEF(NAME, WT, LOAD, 3, PF)                     \
  DEF(NAME, WT, LOAD, 4, PF) DEF(NAME, WT, LOAD, 5, PF) DEF(NAME, WT, LOAD, 6, PF)
#else
#define SPAN_BLOCKS(NAME) {0, NAME##_1, NAME##_2, NAME##_3}
#define DEFINE_SPANS(DEF, NAME, WT, LOAD, PF)                                                          \
  DEF(NAME, WT, LOAD, 1, PF) DEF(NAME, WT, LOAD, 2, PF) DEF(NAME, WT, LOAD, 3, PF)
#endif

/* NAME##_ld writes row m of y at y + m * ldy (ldy >= N: a slice of a wider output); NAME is ldy = N. */
#define DEFINE_BLOCKED_KERNEL(NAME, WT, LOAD)                                                          \
  DEFINE_SPANS(DEFINE_SPAN_OF, NAME, WT, LOAD, 1)                                                      \
  DEFINE_SPANS(DEFINE_WHOLE_OF, NAME##_whole, WT, LOAD, 1)                                             \
  DEFINE_SPANS(DEFINE_WHOLE_OF, NAME##_wide, WT, LOAD, 0)                                              \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, float *, int64_t, \
                            int64_t, int64_t);                                                         \
  typedef void (*NAME##_whole_fn)(const float *, int64_t, const WT *, int64_t, int64_t, int64_t, float *, int64_t, \
                                  int64_t);                                                            \
  static const NAME##_fn NAME##_spans[MB + 1] = SPAN_BLOCKS(NAME);                                     \
  static const NAME##_whole_fn NAME##_wholes[MB + 1] = SPAN_BLOCKS(NAME##_whole);                      \
  static const NAME##_whole_fn NAME##_wides[MB + 1] = SPAN_BLOCKS(NAME##_wide);                        \
  static void NAME##_ld(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int64_t ldy, \
                        int threads) {                                                                 \
    int64_t blocks = (N + NB - 1) / NB, span = span_of(K);                                             \
    float *park = span < K && M <= MB ? parking((size_t)(blocks * PARKED)) : NULL;                     \
    if (M < WIDE_ROWS && (span == K || park)) { /* span by span, each span's blocks in turn */         \
      _Pragma("omp parallel num_threads(threads)")                                                     \
      for (int64_t k0 = 0; k0 < K; k0 += span) {                                                       \
        int64_t k1 = k0 + span < K ? k0 + span : K;                                                    \
        const WT *ws = W + k0 * blocks * NB;                                                           \
        _Pragma("omp for schedule(static)")                                                            \
        for (int64_t b = 0; b < blocks; b++) {                                                         \
          int64_t n0 = b * NB, nn = N - n0 < NB ? N - n0 : NB;                                         \
          for (int64_t m0 = 0; m0 < M; m0 += MB)                                                       \
            NAME##_spans[M - m0 < MB ? M - m0 : MB](x + m0 * K, K, ws + b * NB * (k1 - k0), k0, k1,     \
                                                     park ? park + b * PARKED : NULL, y + m0 * ldy, ldy, n0, nn); \
        }                                                                                              \
      }                                                                                                \
      return;                                                                                          \
    }                                                                                                  \
    /* block by block, all of K at a time; a prompt (WIDE_ROWS) a panel of blocks at a time, every row group   \
     * against the panel's blocks, without prefetching */                                              \
    int wide = M >= WIDE_ROWS;                                                                         \
    const NAME##_whole_fn *run = wide ? NAME##_wides : NAME##_wholes;                                  \
    int64_t panel = wide ? PANEL : 1;                                                                  \
    while (panel > 1 && (blocks + panel - 1) / panel < 2 * threads) panel /= 2;                         \
    _Pragma("omp parallel for schedule(static) num_threads(threads)")                                  \
    for (int64_t p0 = 0; p0 < blocks; p0 += panel) {                                                   \
      int64_t p1 = p0 + panel < blocks ? p0 + panel : blocks;                                          \
      for (int64_t m0 = 0; m0 < M; m0 += MB)                                                           \
        for (int64_t b = p0; b < p1; b++)                                                              \
          run[M - m0 < MB ? M - m0 : MB](x + m0 * K, K, W, blocks, b, span, y + m0 * ldy, ldy,          \
                                         N - b * NB < NB ? N - b * NB : NB);                           \
    }                                                                                                  \
  }                                                                                                    \
  void NAME(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int threads) {    \
    NAME##_ld(x, M, K, W, N, y, N, threads);                                                           \
  }

DEFINE_BLOCKED_KERNEL(linear_f32b, float, load_f32)
DEFINE_BLOCKED_KERNEL(linear_bf16b, uint16_t, load_bf16)

/* ---- row-exact attention ------------------------------------------------------------------------
 * out[i, h] = softmax(scaling * q[i, h] . k[j]) . v[j] over exactly the keys j row i may see, for query
 * rows i and query heads h (key/value head h / (Hq / Hkv): grouped-query attention without copies).
 * Each (row, head) is computed alone, in one fixed order that depends only on its own keys: a row's
 * result is the same whether the call holds one row (plain decoding) or many (a speculative pass). */

#if defined(__AVX512F__)
#define vmul _mm512_mul_ps
#define vadd _mm512_add_ps
#define vsub _mm512_sub_ps
#define vdiv _mm512_div_ps
#define vneg(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000)))
#define vset1 _mm512_set1_ps
#define vmax _mm512_max_ps
static inline vec vexp2i(vec n) { /* 2^n for integral n in [-126, 127] */
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
static inline vec vround(vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline void store_x(float *y, vec v, int n) { _mm512_mask_storeu_ps(y, lanes(n), v); }
static inline vec first_lanes(vec v, int n) { return _mm512_maskz_mov_ps(lanes(n), v); } /* the rest zero */
#else
#define vmul _mm256_mul_ps
#define vadd _mm256_add_ps
#define vsub _mm256_sub_ps
#define vdiv _mm256_div_ps
#define vneg(v) _mm256_xor_ps((v), _mm256_set1_ps(-0.0f))
#define vset1 _mm256_set1_ps
#define vmax _mm256_max_ps
static inline vec vexp2i(vec n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline vec vround(vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline void store_x(float *y, vec v, int n) {
  if (n == LANES) _mm256_storeu_ps(y, v); else _mm256_maskstore_ps(y, lanes(n), v);
}
static inline vec first_lanes(vec v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(lanes(n))); } /* the rest zero */
#endif

static inline float hsum(vec v) { /* fold, then ((l0 + l2) + (l1 + l3)) */
  __m128 r = fold(v);
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps(r, r, 1)));
}

static inline vec vexp(vec x) { /* e^x for x <= 0 (Cephes' expf polynomial), lane by lane */
  x = vmax(x, vset1(-87.0f));
  vec n = vround(vmul(x, vset1(1.44269504088896341f)));
  x = vfmadd(n, vset1(-0.693359375f), x);
  x = vfmadd(n, vset1(2.12194440e-4f), x);
  vec p = vset1(1.9875691500e-4f);
  p = vfmadd(p, x, vset1(1.3981999507e-3f));
  p = vfmadd(p, x, vset1(8.3334519073e-3f));
  p = vfmadd(p, x, vset1(4.1665795894e-2f));
  p = vfmadd(p, x, vset1(1.6666665459e-1f));
  p = vfmadd(p, x, vset1(5.0000001201e-1f));
  p = vfmadd(p, vmul(x, x), vadd(x, vset1(1.0f)));
  return vmul(p, vexp2i(n));
}

#define MAX_D 512
#if defined(__AVX512F__)
/* 16 vectors -> one whose lane j is the sum of v[j]'s lanes, in one fixed order for every j: the halves
 * (l + l+8), then quarters, then pairs within a quarter (a tree of 30 shuffles and 15 adds for 16 sums,
 * against a fold and a 4 x 4 transpose for every 4). The tree leaves lane 4r + t holding v[4t + r]'s sum;
 * one permute puts them in order. */
static inline vec total16(const vec v[16]) {
  vec s[8], u[4], w[2];
  UNROLLED for (int i = 0; i < 8; i++)
    s[i] = vadd(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  UNROLLED for (int i = 0; i < 4; i++)
    u[i] = vadd(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88), _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xDD));
  UNROLLED for (int i = 0; i < 2; i++)
    w[i] = vadd(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x88), _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xDD));
  vec t = vadd(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
}
#define KEYS_A_BLOCK 16
/* s[j0 .. j0 + 16) = scaling * q . k_j (q as NV vectors along d, qv): one key at a time, its products added
 * along d in order from zero, then total16 for the 16 keys; keys past count read key j0 again and are not
 * kept. A compile-time NV unrolls the products, so only the 16 sums and q stay in registers. */
static inline __attribute__((always_inline)) void score_block(const vec *qv, const float *k, int64_t k_sr, int64_t D,
                                                               int64_t j0, int64_t count, const int64_t *keys,
                                                               float scaling, float *s, const int64_t NV) {
  vec acc[16];
  _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++) {
    int64_t j = j0 + t < count ? j0 + t : j0;
    const float *kp = k + (keys ? keys[j] : j) * k_sr;
    vec a = vzero();
    UNROLLED for (int64_t c = 0; c < NV; c++) {
      int n = D - c * LANES < LANES ? (int)(D - c * LANES) : LANES;
      a = vfmadd(qv[c], load_x(kp + c * LANES, n), a);
    }
    acc[t] = a;
  }
  int m = count - j0 < 16 ? (int)(count - j0) : 16;
  store_x(s + j0, vmul(total16(acc), vset1(scaling)), m);
}
#else
#define KEYS_A_BLOCK 4
/* s[j0 .. j0 + 4) = scaling * q . k_j through total4, the missing keys reading key j0 again (not kept) */
static inline __attribute__((always_inline)) void score_block(const vec *qv, const float *k, int64_t k_sr, int64_t D,
                                                               int64_t j0, int64_t count, const int64_t *keys,
                                                               float scaling, float *s, const int64_t NV) {
  const float *q = (const float *)qv; /* AVX2: q as it lies in memory */
  (void)NV;
  const float *kp[4];
  for (int t = 0; t < 4; t++) {
    int64_t j = j0 + t < count ? j0 + t : j0;
    kp[t] = k + (keys ? keys[j] : j) * k_sr;
  }
  vec a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero(); /* even steps of d */
  vec b0 = vzero(), b1 = vzero(), b2 = vzero(), b3 = vzero(); /* odd steps: two chains per key */
  int64_t d = 0;
  for (; d + 2 * LANES <= D; d += 2 * LANES) {
    vec qa = load_x(q + d, LANES), qb = load_x(q + d + LANES, LANES);
    a0 = vfmadd(qa, load_x(kp[0] + d, LANES), a0);
    a1 = vfmadd(qa, load_x(kp[1] + d, LANES), a1);
    a2 = vfmadd(qa, load_x(kp[2] + d, LANES), a2);
    a3 = vfmadd(qa, load_x(kp[3] + d, LANES), a3);
    b0 = vfmadd(qb, load_x(kp[0] + d + LANES, LANES), b0);
    b1 = vfmadd(qb, load_x(kp[1] + d + LANES, LANES), b1);
    b2 = vfmadd(qb, load_x(kp[2] + d + LANES, LANES), b2);
    b3 = vfmadd(qb, load_x(kp[3] + d + LANES, LANES), b3);
  }
  for (; d < D; d += LANES) {
    int n = D - d < LANES ? (int)(D - d) : LANES;
    vec qv = load_x(q + d, n);
    a0 = vfmadd(qv, load_x(kp[0] + d, n), a0);
    a1 = vfmadd(qv, load_x(kp[1] + d, n), a1);
    a2 = vfmadd(qv, load_x(kp[2] + d, n), a2);
    a3 = vfmadd(qv, load_x(kp[3] + d, n), a3);
  }
  a0 = vadd(a0, b0), a1 = vadd(a1, b1), a2 = vadd(a2, b2), a3 = vadd(a3, b3);
  float t4[4];
  _mm_storeu_ps(t4, total4(a0, a1, a2, a3));
  for (int t = 0; t < 4 && j0 + t < count; t++) s[j0 + t] = t4[t] * scaling;
}
#endif

/* out += the weighted values: even keys into one set of accumulators and odd keys into another (two FMA
 * chains a vector, so the FMAs' latency overlaps), the two sets added at the end. NV vectors along d; a
 * compile-time NV keeps the accumulators in registers. */
static inline __attribute__((always_inline)) void weigh_values(const float *s, const float *v, int64_t v_sr,
                                                                int64_t D, int64_t count, const int64_t *keys,
                                                                float inv, float *out, const int64_t NV) {
  vec a[MAX_D / LANES], b[MAX_D / LANES];
  UNROLLED for (int64_t c = 0; c < NV; c++) a[c] = vzero(), b[c] = vzero();
  int64_t j = 0;
  for (; j + 1 < count; j += 2) {
    vec p = vset1(s[j]), r = vset1(s[j + 1]);
    const float *vp = v + (keys ? keys[j] : j) * v_sr, *vr = v + (keys ? keys[j + 1] : j + 1) * v_sr;
    UNROLLED for (int64_t c = 0; c < NV; c++) {
      int n = D - c * LANES < LANES ? (int)(D - c * LANES) : LANES;
      a[c] = vfmadd(p, load_x(vp + c * LANES, n), a[c]);
      b[c] = vfmadd(r, load_x(vr + c * LANES, n), b[c]);
    }
  }
  if (j < count) {
    vec p = vset1(s[j]);
    const float *vp = v + (keys ? keys[j] : j) * v_sr;
    UNROLLED for (int64_t c = 0; c < NV; c++) {
      int n = D - c * LANES < LANES ? (int)(D - c * LANES) : LANES;
      a[c] = vfmadd(p, load_x(vp + c * LANES, n), a[c]);
    }
  }
  UNROLLED for (int64_t c = 0; c < NV; c++) {
    int n = D - c * LANES < LANES ? (int)(D - c * LANES) : LANES;
    store_x(out + c * LANES, vmul(vadd(a[c], b[c]), vset1(inv)), n);
  }
}

/* s[0 .. count) := e^(s - max s); returns their sum, lane-wise then hsum (pad lanes zero). */
static inline float softmax_in_place(float *s, int64_t count) {
  vec mv = vset1(s[0]); /* the largest score (exact in any order) */
  int64_t j = 0;
  for (; j + LANES <= count; j += LANES) mv = vmax(mv, load_x(s + j, LANES));
  float lanes_max[LANES], m = s[0];
  store_x(lanes_max, mv, LANES);
  for (int t = 0; t < LANES; t++) m = lanes_max[t] > m ? lanes_max[t] : m;
  for (; j < count; j++) m = s[j] > m ? s[j] : m;
  vec total = vzero();
  for (j = 0; j < count; j += LANES) { /* s := e^(s - m), summed lane-wise, pad lanes zero */
    int n = count - j < LANES ? (int)(count - j) : LANES;
    vec e = vexp(vsub(load_x(s + j, n), vset1(m)));
    if (n < LANES) e = first_lanes(e, n); /* pad lanes: zero */
    store_x(s + j, e, n);
    total = vadd(total, e);
  }
  return hsum(total);
}

static inline __attribute__((always_inline)) void attend_nv(const float *q, const float *k, int64_t k_sr,
                                                             const float *v, int64_t v_sr, int64_t D, int64_t count,
                                                             const int64_t *keys, float scaling, float *s, float *out,
                                                             const int64_t NV) {
#if defined(__AVX512F__)
  vec qv[MAX_D / LANES];
  UNROLLED for (int64_t c = 0; c < NV; c++) qv[c] = load_x(q + c * LANES, D - c * LANES < LANES ? (int)(D - c * LANES) : LANES);
#else
  const vec *qv = (const vec *)q;
#endif
  for (int64_t j0 = 0; j0 < count; j0 += KEYS_A_BLOCK) score_block(qv, k, k_sr, D, j0, count, keys, scaling, s, NV);
  weigh_values(s, v, v_sr, D, count, keys, 1.0f / softmax_in_place(s, count), out, NV);
}

/* One (row, head): the scores of its keys, their softmax, the weighted values; D along NV vectors (64- and
 * 128-wide heads get their own unrolled copies). */
static void attend_one(const float *q, const float *k, int64_t k_sr, const float *v, int64_t v_sr, int64_t D,
                       int64_t count, const int64_t *keys, float scaling, float *s, float *out) {
  int64_t nv = (D + LANES - 1) / LANES;
  if (nv == 64 / LANES) attend_nv(q, k, k_sr, v, v_sr, D, count, keys, scaling, s, out, 64 / LANES);
  else if (nv == 128 / LANES) attend_nv(q, k, k_sr, v, v_sr, D, count, keys, scaling, s, out, 128 / LANES);
  else attend_nv(q, k, k_sr, v, v_sr, D, count, keys, scaling, s, out, nv);
}

/* The G query heads of R rows (1 or 2) that share a key/value head (grouped-query attention), together: a block of
 * 16 keys is scored for every head of every row while it sits in L1, and each value vector is read once for all of
 * them, so the keys and values stream from L2 once per R rows instead of once a head. Two rows go together over the
 * first `common` keys, the keys both see (a step's rows share the cached prefix); each row's other keys follow alone.
 * Each head's scores are summed as score_block sums them and its weighted values in one chain a vector, key by key,
 * whatever R is: a head's result depends only on its own query and keys. R * G * NV accumulators in registers:
 * compile-time R, G and NV. */
#define PART(c) (D - (c) * LANES < LANES ? (int)(D - (c) * LANES) : LANES)
static inline __attribute__((always_inline)) void attend_heads(const float *const q[], int64_t q_sh, const float *k,
                                                                int64_t k_sr, const float *v, int64_t v_sr, int64_t D,
                                                                const int64_t count[], const int64_t *const keys[],
                                                                int64_t common, float scaling, float *const s[],
                                                                int64_t s_stride, float *const out[], const int R,
                                                                const int G, const int64_t NV) {
  if (R == 1) common = count[0];
  int64_t joint = R == 1 ? common : common / KEYS_A_BLOCK * KEYS_A_BLOCK; /* whole blocks of keys both rows see */
  for (int r = 0; r < R; r++)
    for (int64_t j0 = r ? joint : 0; j0 < count[r]; j0 += KEYS_A_BLOCK) /* the joint blocks, then row r's own */
      for (int rr = r; rr < (j0 < joint ? R : r + 1); rr++)
        for (int h = 0; h < G; h++) {
#if defined(__AVX512F__)
          vec qv[MAX_D / LANES];
          UNROLLED for (int64_t c = 0; c < NV; c++) qv[c] = load_x(q[rr] + h * q_sh + c * LANES, PART(c));
#else
          const vec *qv = (const vec *)(q[rr] + h * q_sh);
#endif
          score_block(qv, k, k_sr, D, j0, count[rr], keys[rr], scaling, s[rr] + h * s_stride, NV);
        }
  float inv[2][4]; /* fixed sizes (R <= 2, G <= 4, NV <= 8): a variable-length array would keep the sums in memory */
  for (int r = 0; r < R; r++)
    for (int h = 0; h < G; h++) inv[r][h] = 1.0f / softmax_in_place(s[r] + h * s_stride, count[r]);
  vec a[2][4][8];
  UNROLLED for (int r = 0; r < R; r++)
    UNROLLED for (int h = 0; h < G; h++)
      UNROLLED for (int64_t c = 0; c < NV; c++) a[r][h][c] = vzero();
  for (int64_t j = 0; j < common; j++) {
    const float *vp = v + (keys[0] ? keys[0][j] : j) * v_sr;
    vec vv[8];
    UNROLLED for (int64_t c = 0; c < NV; c++) vv[c] = load_x(vp + c * LANES, PART(c));
    UNROLLED for (int r = 0; r < R; r++)
      UNROLLED for (int h = 0; h < G; h++) {
        vec p = vset1(s[r][h * s_stride + j]);
        UNROLLED for (int64_t c = 0; c < NV; c++) a[r][h][c] = vfmadd(p, vv[c], a[r][h][c]);
      }
  }
  UNROLLED for (int r = 0; r < R; r++) {
    for (int64_t j = common; j < count[r]; j++) {
      const float *vp = v + (keys[r] ? keys[r][j] : j) * v_sr;
      vec vv[8];
      UNROLLED for (int64_t c = 0; c < NV; c++) vv[c] = load_x(vp + c * LANES, PART(c));
      UNROLLED for (int h = 0; h < G; h++) {
        vec p = vset1(s[r][h * s_stride + j]);
        UNROLLED for (int64_t c = 0; c < NV; c++) a[r][h][c] = vfmadd(p, vv[c], a[r][h][c]);
      }
    }
    UNROLLED for (int h = 0; h < G; h++)
      UNROLLED for (int64_t c = 0; c < NV; c++) store_x(out[r] + h * D + c * LANES, vmul(a[r][h][c], vset1(inv[r][h])), PART(c));
  }
}
#undef PART

/* The G heads at q (stride q_sh) of one row, grouped where a compiled shape fits (AVX-512: 2 to 4 heads of 64,
 * 2 of 128), else one at a time. Which path a model takes depends only on its shapes. */
static void attend_row_group(const float *q, int64_t q_sh, const float *k, int64_t k_sr, const float *v, int64_t v_sr,
                             int64_t D, int64_t count, const int64_t *keys, float scaling, float *s, int64_t s_stride,
                             float *out, int64_t G) {
#if defined(__AVX512F__) /* AVX2's 16 registers hold no group's sums */
  int64_t nv = (D + LANES - 1) / LANES;
  const float *qs[1] = {q};
  const int64_t cs[1] = {count}, *ks[1] = {keys};
  float *ss[1] = {s}, *os[1] = {out};
#define GROUPED(g, n) if (G == (g) && nv == (n) * 16 / LANES) { \
    attend_heads(qs, q_sh, k, k_sr, v, v_sr, D, cs, ks, count, scaling, ss, s_stride, os, 1, g, (n) * 16 / LANES); return; }
  GROUPED(2, 4) GROUPED(3, 4) GROUPED(4, 4) GROUPED(2, 8)
#undef GROUPED
#else
  (void)s_stride;
#endif
  for (int64_t h = 0; h < G; h++) attend_one(q + h * q_sh, k, k_sr, v, v_sr, D, count, keys, scaling, s, out + h * D);
}

/* How many of two rows' keys are the same keys from the first on (row i's key j: keys_i[j], or j without a list). */
static int64_t common_keys(int64_t c0, const int64_t *k0, int64_t c1, const int64_t *k1) {
  int64_t n = c0 < c1 ? c0 : c1, j = 0;
  if (!k0 && !k1) return n;
  while (j < n && (k0 ? k0[j] : j) == (k1 ? k1[j] : j)) j++;
  return j;
}

/* Rows i0 and i1 (i1 < 0: none) over key/value head g, whose first `common` keys are the same: together where a
 * compiled pair shape fits (AVX-512: 2 to 4 heads of 64) and both see keys, else each alone (attend_row_group). */
static void attend_pair(const float *q, int64_t q_sr, int64_t q_sh, const float *k, int64_t k_sr, const float *v,
                        int64_t v_sr, int64_t D, int64_t Hq, int64_t g, int64_t group, const int64_t *spec,
                        const int64_t *keys, int64_t common, float scaling, float *s, int64_t s_stride, float *out,
                        int64_t i0, int64_t i1) {
  int64_t rows[2] = {i0, i1}, h = g * group;
#if defined(__AVX512F__)
  if (i1 >= 0 && spec[2 * i0] > 0 && spec[2 * i1] > 0 && (D + LANES - 1) / LANES == 64 / LANES && group >= 2 &&
      group <= 4) {
    const float *qs[2];
    const int64_t *kl[2];
    int64_t count[2];
    float *ss[2], *os[2];
    for (int r = 0; r < 2; r++) {
      int64_t i = rows[r];
      qs[r] = q + i * q_sr + h * q_sh, count[r] = spec[2 * i];
      kl[r] = spec[2 * i + 1] < 0 ? NULL : keys + spec[2 * i + 1];
      ss[r] = s + r * group * s_stride, os[r] = out + (i * Hq + h) * D;
    }
    if (group == 2) attend_heads(qs, q_sh, k, k_sr, v, v_sr, D, count, kl, common, scaling, ss, s_stride, os, 2, 2, 4);
    else if (group == 3) attend_heads(qs, q_sh, k, k_sr, v, v_sr, D, count, kl, common, scaling, ss, s_stride, os, 2, 3, 4);
    else attend_heads(qs, q_sh, k, k_sr, v, v_sr, D, count, kl, common, scaling, ss, s_stride, os, 2, 4, 4);
    return;
  }
#else
  (void)common;
#endif
  for (int r = 0; r < 2; r++) {
    int64_t i = rows[r];
    if (i < 0) continue;
    int64_t count = spec[2 * i];
    const int64_t *kl = spec[2 * i + 1] < 0 ? NULL : keys + spec[2 * i + 1];
    if (count == 0) {
      memset(out + (i * Hq + h) * D, 0, (size_t)(group * D) * sizeof(float));
      continue;
    }
    attend_row_group(q + i * q_sr + h * q_sh, q_sh, k, k_sr, v, v_sr, D, count, kl, scaling, s, s_stride,
                     out + (i * Hq + h) * D, group);
  }
}

/* q: rows x heads with strides (q_sr, q_sh) in floats, last dim contiguous; k, v likewise per key and
 * per key/value head. Row i sees spec[2i] keys: the first ones (spec[2i+1] < 0) or keys[spec[2i+1] ...].
 * out: [rows, Hq, D] contiguous. Returns 0, or -1 for a head size over MAX_D / no memory. */
int attend_f32(const float *q, int64_t q_sr, int64_t q_sh, const float *k, int64_t k_sr, int64_t k_sh,
               const float *v, int64_t v_sr, int64_t v_sh, int64_t rows, int64_t Hq, int64_t Hkv, int64_t D,
               const int64_t *spec, const int64_t *keys, float scaling, float *out, int threads) {
  if (D > MAX_D || Hq % Hkv) return -1;
  int64_t most = 0;
  for (int64_t i = 0; i < rows; i++) most = spec[2 * i] > most ? spec[2 * i] : most;
  int failed = 0;
  int64_t pairs = (rows + 1) / 2, *common = KEPT(int64_t, pairs + 1);
  if (!common) return -1;
  for (int64_t p = 0; p < pairs; p++) /* the keys rows 2p and 2p + 1 share, once for every key/value head */
    common[p] = 2 * p + 1 < rows ? common_keys(spec[4 * p], spec[4 * p + 1] < 0 ? NULL : keys + spec[4 * p + 1],
                                               spec[4 * p + 2], spec[4 * p + 3] < 0 ? NULL : keys + spec[4 * p + 3])
                                 : 0;
  _Pragma("omp parallel num_threads(threads)") {
    float *s = KEPT(float, 2 * (most + LANES) * (Hq / Hkv)); /* scores of two rows' heads */
    if (!s) failed = 1;
    _Pragma("omp for schedule(static)") for (int64_t t = 0; t < pairs * Hkv; t++) {
      if (!s) continue;
      /* by key/value head, then pair of rows: one head's keys stay in cache while every row reads them */
      int64_t group = Hq / Hkv, g = t / pairs, p = t % pairs;
      attend_pair(q, q_sr, q_sh, k + g * k_sh, k_sr, v + g * v_sh, v_sr, D, Hq, g, group, spec, keys, common[p],
                  scaling, s, most + LANES, out, 2 * p, 2 * p + 1 < rows ? 2 * p + 1 : -1);
    }
  }
  return failed ? -1 : 0;
}

/* The keys each of q query rows may see, from an additive float mask [q, keys] (row stride ld; a 0 where the row
 * may see the key): spec[2i] = row i's count, spec[2i + 1] = where its keys start in list; list = the keys' indices,
 * row after row (what attend_f32 takes, as torch's (mask == 0).nonzero() lists them). Returns how many in all. */
int64_t mask_keys(const float *mask, int64_t ld, int64_t q, int64_t keys, int64_t *spec, int64_t *list) {
  int64_t total = 0;
  for (int64_t i = 0; i < q; i++) {
    const float *m = mask + i * ld;
    int64_t at = total;
    for (int64_t j = 0; j < keys; j++)
      if (m[j] == 0.0f) list[total++] = j;
    spec[2 * i] = total - at, spec[2 * i + 1] = at;
  }
  return total;
}

/* ---- RMS norm -------------------------------------------------------------------------------------
 * y[i] = (x[i] / sqrt(mean(x[i]^2) + eps)) * w, as Llama-family RMSNorm modules compute it in fp32 (their
 * `weight * (x * rsqrt(var + eps))`), each row alone: one call replaces the ~7 torch ops (and their
 * per-op overhead) of the module's forward. */
void rmsnorm_f32(const float *x, int64_t rows, int64_t d, const float *w, float eps, float *y) {
  for (int64_t i = 0; i < rows; i++) {
    const float *xi = x + i * d;
    float *yi = y + i * d;
    vec acc = vzero();
    int64_t c = 0;
    for (; c + LANES <= d; c += LANES) {
      vec v = load_x(xi + c, LANES);
      acc = vfmadd(v, v, acc);
    }
    if (c < d) {
      vec v = load_x(xi + c, (int)(d - c));
      acc = vfmadd(v, v, acc);
    }
    float inv = 1.0f / sqrtf(hsum(acc) / (float)d + eps);
    vec s = vset1(inv);
    for (c = 0; c < d; c += LANES) {
      int n = d - c < LANES ? (int)(d - c) : LANES;
      store_x(yi + c, vmul(load_f32(w + c, n), vmul(load_x(xi + c, n), s)), n);
    }
  }
}

/* ---- 4-bit and 8-bit weights -------------------------------------------------------------------------
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
#define QG 32
#define QV (QG / LANES) /* vectors per group */
#if defined(__AVX512F__)
#define MBQ 6 /* 6 x 4 accumulators + 4 x 2 weights + 1 input: 33 of 32 registers, yet the fastest measured */
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
#define MBQ 4 /* measured: 2 to 6 rows per block differ by a few percent either way on Zen 3 and Zen 4 */
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
typedef void (*q_fn)(const float *, int64_t, const uint8_t *, const float *, int64_t, float *, int64_t, int64_t);
#define DEFINE_QBLOCKS(T, GB, S)                                                                       \
  DEFINE_QBLOCK(T, 1, GB, S) DEFINE_QBLOCK(T, 2, GB, S) DEFINE_QBLOCK(T, 3, GB, S)                     \
  DEFINE_QBLOCK(T, 4, GB, S) DEFINE_QBLOCK(T, 5, GB, S) DEFINE_QBLOCK(T, 6, GB, S)                     \
  static const q_fn T##_blocks[7] = {0, T##_1, T##_2, T##_3, T##_4, T##_5, T##_6};
DEFINE_QBLOCKS(q4, QG / 2, 2)
DEFINE_QBLOCKS(q8, QG, 1)

/* y[M, N] = x[M, K] W^T for grouped-integer W (above): wq [Np / 4, K / 32, 4, GB] integers, ds [Np / 4, K / 32, 4, S]
 * scales (and low ends), Np = N rounded up to a multiple of 4 (padding rows are computed, not stored). K a
 * multiple of 32. */
static void linear_q(const q_fn *blocks, int64_t GB, int64_t S, const float *x, int64_t M, int64_t K,
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
static void scatter_cols(const float *buf, int64_t lb, int64_t m0, int rows, int width, int64_t n0, const int32_t *cols,
                         int64_t split, float *y, int64_t ldy, float *y2, int64_t ld2) {
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
    _Pragma("omp parallel for schedule(static) num_threads(threads)")
    for (int64_t t = paired; t < tiles; t++)
      for (int64_t m0 = 0; m0 < M; m0 += A8_ROWS) {
        int mm = M - m0 < A8_ROWS ? (int)(M - m0) : A8_ROWS;
        float buf[A8_ROWS * A8_TILE];
        blocks[mm](xq + m0 * K, dx + m0 * G, sx + m0 * G, K, w + t * G * GB, dm + t * G * 2 * A8_TILE, G,
                   cols ? buf : y + m0 * ldy + t * A8_TILE, cols ? A8_TILE : ldy);
        if (cols) scatter_cols(buf, A8_TILE, m0, mm, A8_TILE, t * A8_TILE, cols, split, y, ldy, y2, ld2);
      }
  }
  return failed ? -1 : 0;
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
 * in the layouts above. -1: out of memory. */
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
/* The 8-bit roof: n steps of 12 independent chains of vpdpbusd (64 multiply-adds each), timed by the caller. */
int dot8_burn(int64_t n) {
  __m512i a[12], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  UNROLLED for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
  for (int64_t k = 0; k < n; k++) {
    UNROLLED for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
  }
  __m512i t = a[0];
  for (int i = 1; i < 12; i++) t = _mm512_add_epi32(t, a[i]);
  return _mm512_reduce_add_epi32(t);
}
int rowinv_a8(void) { return 1; }
#else
int linear_q4a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  (void)x, (void)M, (void)K, (void)w, (void)dm, (void)N, (void)y, (void)ldy, (void)threads;
  return -2; /* not in this build */
}
int linear_q8a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads) {
  return linear_q4a8_ld(x, M, K, w, dm, N, y, ldy, threads);
}
int linear_q8a8_map(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                    int64_t ldy, const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  (void)x, (void)M, (void)K, (void)w, (void)dm, (void)N, (void)y, (void)ldy, (void)cols, (void)split, (void)y2;
  (void)ld2, (void)threads;
  return -2;
}
int dot8_burn(int64_t n) { return (int)n * 0; }
int rowinv_a8(void) { return 0; }
#endif

/* One Linear of a layer as the layer-front call takes it: its kind (LIN_F32, LIN_BF16: weight [N, K]; LIN_F32B,
 * LIN_BF16B: the same weights blocked; LIN_Q4: `linear_q4`'s nibbles and scales; LIN_Q4A8: `linear_q4a8_ld`'s),
 * its N outputs written at y + m * ldy. The same calls, so the same sums, as the module's own forward makes
 * (linear_f32, linear_bf16, linear_f32b, linear_bf16b, linear_q4, linear_q4a8_ld). 0, or the call's failure. */
enum { LIN_F32 = 0, LIN_BF16 = 1, LIN_Q4 = 2, LIN_F32B = 3, LIN_BF16B = 4, LIN_Q4A8 = 5, LIN_BF16X = 6 };
int linear_bf16x_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                    int threads); /* (bf16 on AMX tiles, below) */
static int lin(int kind, const void *w, const float *dm, const float *x, int64_t M, int64_t K, int64_t N, float *y,
                int64_t ldy, int threads) {
  if (kind == LIN_F32) linear_f32_ld(x, M, K, (const float *)w, N, y, ldy, threads);
  else if (kind == LIN_BF16) linear_bf16_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else if (kind == LIN_F32B) linear_f32b_ld(x, M, K, (const float *)w, N, y, ldy, threads);
  else if (kind == LIN_BF16B) linear_bf16b_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else if (kind == LIN_Q4A8) return linear_q4a8_ld(x, M, K, (const uint8_t *)w, dm, N, y, ldy, threads);
  else if (kind == LIN_BF16X) return linear_bf16x_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else linear_q(q4_blocks, QG / 2, 2, x, M, K, (const uint8_t *)w, dm, N, y, ldy, threads);
  return 0;
}

/* A stream layer's draft Linears (NULL: none): a cheaper copy of each of the layer's Linears (the front's parts in
 * order, then down) that computes the stream rows n_main.. only. Stream rows draft tokens and never verify them,
 * and main rows never see them, so what they are computed with changes drafts, never output; the main rows keep
 * the layer's own weights, and on a row-invariant kernel their sums are the same whatever other rows the call has. */
typedef struct {
  const int *kind;
  const void *const *w;
  const float *const *dm;
  int64_t down_kind;
  const void *down_w;
  const float *down_dm;
  int64_t min_rows; /* the copies take the stream rows where there are at least this many (fewer cost little more
                       than the main rows' read of the weights) */
} draft_args;

/* lin on rows 0 .. q - 1, the draft weights (dw: NULL, none) taking rows n_main.. where there are min_rows of them */
static int lin_rows(int kind, const void *w, const float *dm, int dkind, const void *dw, const float *ddm,
                    int64_t min_rows, const float *x, int64_t q, int64_t n_main, int64_t K, int64_t N, float *y,
                    int64_t ldy, int threads) {
  if (!dw || q - n_main < min_rows || n_main >= q) return lin(kind, w, dm, x, q, K, N, y, ldy, threads);
  int failed = n_main > 0 ? lin(kind, w, dm, x, n_main, K, N, y, ldy, threads) : 0;
  return failed ? failed : lin(dkind, dw, ddm, x + n_main * K, q - n_main, K, N, y + n_main * ldy, ldy, threads);
}
#define DRAFT_PART(dr, i) (dr) ? (dr)->kind[i] : 0, (dr) ? (dr)->w[i] : NULL, (dr) ? (dr)->dm[i] : NULL, \
                          (dr) ? (dr)->min_rows : 0

/* ---- RoPE and the cache write -------------------------------------------------------------------------
 * A step's fused q/k/v rows [B, q, (H + 2 Hkv) D] (qkv, contiguous) out to where attention reads them:
 * q rotated into q_out [B, q, H, D]; k rotated and v as they are into the cache's slots start .. start + q
 * of each row (k_cache, v_cache: [B, Hkv, capacity, D] buffers, capacity `cap`). The rotation is
 * transformers' apply_rotary_pos_emb in fp32, (x * cos) + (rotate_half(x) * sin) with
 * rotate_half(x) = (-x2, x1): each product and the sum rounded on its own, so never contracted to an fma
 * (fp-contract off), and bit for bit what its torch ops compute. cos, sin: [B, q, D]. */
__attribute__((optimize("fp-contract=off")))
static void rotate(const float *x, const float *c, const float *s, int64_t D, float *out) {
  int64_t h = D / 2;
  for (int64_t i = 0; i < h; i++) {
    float a = x[i] * c[i], b = -x[i + h] * s[i];
    float e = x[i + h] * c[i + h], f = x[i] * s[i + h];
    out[i] = a + b;
    out[i + h] = e + f;
  }
}

void rope_store(const float *qkv, int64_t B, int64_t q, int64_t H, int64_t Hkv, int64_t D, const float *cos,
                const float *sin, float *q_out, float *k_cache, float *v_cache, int64_t cap, int64_t start) {
  int64_t width = (H + 2 * Hkv) * D;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < q; t++) {
      const float *row = qkv + (b * q + t) * width, *c = cos + (b * q + t) * D, *s = sin + (b * q + t) * D;
      for (int64_t j = 0; j < H; j++) rotate(row + j * D, c, s, D, q_out + ((b * q + t) * H + j) * D);
      for (int64_t j = 0; j < Hkv; j++) {
        int64_t slot = ((b * Hkv + j) * cap + start + t) * D;
        rotate(row + (H + j) * D, c, s, D, k_cache + slot);
        memcpy(v_cache + slot, row + (H + Hkv + j) * D, (size_t)D * sizeof(float));
      }
    }
}

/* ---- A decoding step's layer, up to its MLP's activation ------------------------------------------------
 * What a Llama-form decoder layer computes for one sequence's step (rows q) before the activation of its
 * MLP, as its modules compute it on this kernel: the same calls in the same order, so the same numbers.
 *   x = rmsnorm(h, w1); qkv = x Wqkv^T; q and k rotated, k and v stored in the cache (rope_store);
 *   a = attention over the cache (attend_f32: spec/keys say what each row sees); h2 = h + a Wo^T;
 *   gu = rmsnorm(h2, w2) Wgu^T.
 * One call instead of ~25 Python-level operations. h [q, d] in; h2 [q, d], gu [q, n_gu] out. Returns 0, or
 * -1 (no memory, a head over MAX_D). */
#define LORA_MAX_RANK 256
/* RG rows at once (1 to 4, compile-time): t[i][c0 .. c0 + 2 LANES) = x_i . At's columns, each summed over K in order,
 * At's vectors read once for the RG rows; then delta_i = t_i Bt, each output summed over the rank in order, Bt's
 * vectors read once for the RG rows. w0, w1: the two t vectors' widths (w1 = 0: one vector). A row's numbers do not
 * depend on RG. */
static inline __attribute__((always_inline)) void lora_group(const float *x, int64_t K, const uint16_t *At,
                                                             const uint16_t *Bt, int64_t r, int64_t N, float *t, float *delta,
                                                             const int RG) {
  for (int64_t c0 = 0; c0 < r; c0 += 2 * LANES) {
    int64_t left = r - c0;
    int w0 = left < LANES ? (int)left : LANES, w1 = left <= LANES ? 0 : (left - LANES < LANES ? (int)(left - LANES) : LANES);
    vec a[4], b[4];
    UNROLLED for (int i = 0; i < RG; i++) a[i] = vzero(), b[i] = vzero();
    for (int64_t k = 0; k < K; k++) {
      vec va = load_bf16(At + k * r + c0, w0), vb = w1 ? load_bf16(At + k * r + c0 + LANES, w1) : vzero();
      UNROLLED for (int i = 0; i < RG; i++) {
        vec xv = vset1(x[i * K + k]);
        a[i] = vfmadd(xv, va, a[i]);
        b[i] = vfmadd(xv, vb, b[i]);
      }
    }
    UNROLLED for (int i = 0; i < RG; i++) {
      store_x(t + i * LORA_MAX_RANK + c0, a[i], w0);
      if (w1) store_x(t + i * LORA_MAX_RANK + c0 + LANES, b[i], w1);
    }
  }
  int64_t n0 = 0;
  for (; n0 + 4 * LANES <= N; n0 += 4 * LANES) { /* 4 vectors of outputs for each row in registers */
    vec acc[4][4];
    UNROLLED for (int i = 0; i < RG; i++) UNROLLED for (int c = 0; c < 4; c++) acc[i][c] = vzero();
    for (int64_t j = 0; j < r; j++) {
      vec w[4];
      UNROLLED for (int c = 0; c < 4; c++) w[c] = load_bf16(Bt + j * N + n0 + c * LANES, LANES);
      UNROLLED for (int i = 0; i < RG; i++) {
        vec tv = vset1(t[i * LORA_MAX_RANK + j]);
        UNROLLED for (int c = 0; c < 4; c++) acc[i][c] = vfmadd(tv, w[c], acc[i][c]);
      }
    }
    UNROLLED for (int i = 0; i < RG; i++) UNROLLED for (int c = 0; c < 4; c++) store_x(delta + i * N + n0 + c * LANES, acc[i][c], LANES);
  }
  for (; n0 < N; n0 += LANES) { /* the rest, a vector at a time */
    int w = N - n0 < LANES ? (int)(N - n0) : LANES;
    UNROLLED for (int i = 0; i < RG; i++) {
      vec acc = vzero();
      for (int64_t j = 0; j < r; j++) acc = vfmadd(vset1(t[i * LORA_MAX_RANK + j]), load_bf16(Bt + j * N + n0, w), acc);
      store_x(delta + i * N + n0, acc, w);
    }
  }
}
/* A row adapter's delta, delta [m, N] = (x [m, K] A^T) B^T, from At = A^T [K, r] and Bt = B^T [r, N] (bf16, contiguous: half the read of fp32 factors, which
 * bound this step: ~1.3 MB a layer at rank 32), in
 * groups of up to 4 rows (`lora_group`: the outputs along the vector lanes, no horizontal sums, the factors read once a
 * group; a rank-32 adapter is ~20 k FMAs a row). Stream rows only draft, so this order is free to choose; StreamRowLoRA's
 * forward calls the same function. -1 for a rank over LORA_MAX_RANK. */
int lora_rows(const float *x, int64_t m, int64_t K, const uint16_t *At, const uint16_t *Bt, int64_t r, int64_t N,
              float *delta) {
  if (r > LORA_MAX_RANK) return -1;
  float t[4 * LORA_MAX_RANK];
  for (int64_t i = 0; i < m; i += 4) {
    int rg = m - i < 4 ? (int)(m - i) : 4;
    const float *xi = x + i * K;
    float *di = delta + i * N;
    if (rg == 4) lora_group(xi, K, At, Bt, r, N, t, di, 4);
    else if (rg == 3) lora_group(xi, K, At, Bt, r, N, t, di, 3);
    else if (rg == 2) lora_group(xi, K, At, Bt, r, N, t, di, 2);
    else lora_group(xi, K, At, Bt, r, N, t, di, 1);
  }
  return 0;
}
/* Stream rows n .. q - 1 of y (row stride ld, N columns) += (x A^T) B^T of the same rows of x [q, K]: a row
 * adapter as StreamRowLoRA computes it (`lora_rows`, then the add), At = A^T [K, r], Bt = B^T [r, N] in bf16. A rank with
 * LORA_TILES set: A [r, K] and B [N, r] as bf16 tiles (`amx_tiles.tiled`) and both products on AMX
 * (linear_bf16x), as StreamRowLoRA computes it on a layer whose Linears are on tiles. */
#define LORA_TILES ((int64_t)1 << 32)
static int lora_add(const float *x, int64_t q, int64_t n, int64_t K, const float *A, const float *B, int64_t r,
                    float *y, int64_t ld, int64_t N, int threads) {
  int64_t m = q - n, tiles = r & LORA_TILES;
  if (m <= 0) return 0;
  r &= LORA_TILES - 1;
  float *t = KEPT(float, m * r), *delta = KEPT(float, m * N);
  int failed = !t || !delta;
  if (!failed && tiles)
    failed = linear_bf16x_ld(x + n * K, m, K, (const uint16_t *)A, r, t, r, threads) ||
             linear_bf16x_ld(t, m, r, (const uint16_t *)B, N, delta, N, threads);
  else if (!failed)
    failed = lora_rows(x + n * K, m, K, (const uint16_t *)A, (const uint16_t *)B, r, N, delta);
  if (!failed)
    for (int64_t i = 0; i < m; i++) {
      float *yi = y + (n + i) * ld;
      const float *di = delta + i * N;
      int64_t j = 0;
      for (; j + LANES <= N; j += LANES) store_x(yi + j, vadd(load_x(yi + j, LANES), load_x(di + j, LANES)), LANES);
      for (; j < N; j++) yi[j] += di[j];
    }
  return failed ? -1 : 0;
}

int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads);
/* stream rows a step needs for their attention to go on tiles: below, the vector code costs less (SmolLM2's heads over
 * 259 keys, one thread, ad-hoc: 4 rows 39.6 us against 43.2 on tiles, 6 rows 54.2 against 46.3, 8 rows 114.7 against
 * 76.6, 20 rows 149.4 against 80.6) */
#define TILE_STREAM_ROWS 8
int attend_tiles_rows(void) { return TILE_STREAM_ROWS; } /* rowinv_steps.TiledStreams decides by it too */

/* The layer's Linears, in order: n_qkv_parts writing q's, k's and v's columns of qkv side by side (one fused
 * call, or q, k and v), o, then n_gu_parts writing gate's and up's columns of gu (one fused call, or gate and
 * up): kind[i], w[i], dm[i] (LIN_Q4's scales, else NULL), n[i] outputs. lora: NULL, or the A and B weights of
 * the q, k, v, o, gate and up row adapters (rank `rank`) that rows n_main.. get. */
static int front(const float *h, int64_t q, int64_t d, const float *w1, const float *w2, float eps, int64_t n_qkv_parts,
                 int64_t n_gu_parts, const int *kind, const void *const *w, const float *const *dm, const int64_t *n,
                 int64_t H, int64_t Hkv, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
                 int64_t cap, int64_t start, const int64_t *spec, const int64_t *keys, float scaling, float *h2,
                 float *gu, const float *const *lora, int64_t rank, int64_t n_main, const draft_args *dr, int threads) {
  int64_t n_qkv = (H + 2 * Hkv) * D, o_at = n_qkv_parts, n_gu = 0;
  for (int64_t i = 0; i < n_gu_parts; i++) n_gu += n[o_at + 1 + i];
  int64_t I = n_gu / 2;
  if (!lora) n_main = q; /* no row adapters: nothing to add, no stream rows to draft with */
  float *x = KEPT(float, q * d), *qkv = KEPT(float, q * n_qkv);
  float *qr = KEPT(float, q * H * D), *a = KEPT(float, q * H * D);
  float *o = KEPT(float, q * d);
  int failed = !x || !qkv || !qr || !a || !o;
  if (!failed) {
    rmsnorm_f32(h, q, d, w1, eps, x);
    for (int64_t i = 0, col = 0; i < n_qkv_parts && !failed; col += n[i], i++)
      failed = lin_rows(kind[i], w[i], dm[i], DRAFT_PART(dr, i), x, q, n_main, d, n[i], qkv + col, n_qkv, threads);
    if (!failed && n_main < q) /* q, k, v adapters (lora: A, B of q, k, v, o, gate, up) */
      failed = lora_add(x, q, n_main, d, lora[0], lora[1], rank, qkv, n_qkv, H * D, threads) ||
               lora_add(x, q, n_main, d, lora[2], lora[3], rank, qkv + H * D, n_qkv, Hkv * D, threads) ||
               lora_add(x, q, n_main, d, lora[4], lora[5], rank, qkv + (H + Hkv) * D, n_qkv, Hkv * D, threads);
  }
  if (!failed) {
    rope_store(qkv, 1, q, H, Hkv, D, cos, sin, qr, k_cache, v_cache, cap, start);
    /* stream rows on tiles where the layer's Linears are, 8 or more of them (attend_tiles; rowinv_steps.TiledStreams,
     * the modules' path, decides alike) */
    int64_t first = q - n_main >= TILE_STREAM_ROWS && kind[0] == LIN_BF16X ? n_main : q;
    failed = attend_f32(qr, H * D, D, k_cache, D, cap * D, v_cache, D, cap * D, first, H, Hkv, D, spec, keys, scaling, a,
                        threads);
    if (!failed && first < q) {
      failed = attend_tiles(qr + first * H * D, H * D, D, k_cache, v_cache, cap * D, q - first, H, Hkv, D, spec + 2 * first,
                            keys, scaling, a + first * H * D, threads);
      if (failed == -2)
        failed = attend_f32(qr + first * H * D, H * D, D, k_cache, D, cap * D, v_cache, D, cap * D, q - first, H, Hkv, D,
                            spec + 2 * first, keys, scaling, a + first * H * D, threads);
    }
  }
  if (!failed) {
    failed = lin_rows(kind[o_at], w[o_at], dm[o_at], DRAFT_PART(dr, o_at), a, q, n_main, H * D, d, o, d, threads);
    if (!failed && n_main < q) failed = lora_add(a, q, n_main, H * D, lora[6], lora[7], rank, o, d, d, threads);
  }
  if (!failed) {
    for (int64_t i = 0; i < q * d; i++) h2[i] = h[i] + o[i];
    rmsnorm_f32(h2, q, d, w2, eps, x);
    for (int64_t i = 0, col = 0; i < n_gu_parts && !failed; col += n[o_at + 1 + i], i++)
      failed = lin_rows(kind[o_at + 1 + i], w[o_at + 1 + i], dm[o_at + 1 + i], DRAFT_PART(dr, o_at + 1 + i), x, q,
                        n_main, d, n[o_at + 1 + i], gu + col, n_gu, threads);
    if (!failed && n_main < q)
      failed = lora_add(x, q, n_main, d, lora[8], lora[9], rank, gu, n_gu, I, threads) ||
               lora_add(x, q, n_main, d, lora[10], lora[11], rank, gu + I, n_gu, I, threads);
  }
  return failed ? -1 : 0;
}
int layer_front(const float *h, int64_t q, int64_t d, const float *w1, const float *w2, float eps, int64_t n_qkv_parts,
                int64_t n_gu_parts, const int *kind, const void *const *w, const float *const *dm, const int64_t *n,
                int64_t H, int64_t Hkv, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
                int64_t cap, int64_t start, const int64_t *spec, const int64_t *keys, float scaling, float *h2,
                float *gu, const float *const *lora, int64_t rank, int64_t n_main, int threads) {
  return front(h, q, d, w1, w2, eps, n_qkv_parts, n_gu_parts, kind, w, dm, n, H, Hkv, D, cos, sin, k_cache, v_cache,
               cap, start, spec, keys, scaling, h2, gu, lora, rank, n_main, NULL, threads);
}

/* ---- A decoding step's layer after its MLP's activation ---------------------------------------------------
 * out = h2 + down(a * up) for rows q, as the modules compute it after layer_front: the activation's output a
 * [q, I] times the up projection's columns (up, row stride ld_up) element by element, the down projection
 * (lin: kind, w, dm, d outputs), its stream-row adapter's delta added to rows n_main.. (lora_A [r, I], lora_B
 * [d, r], or NULL: StreamRowLoRA's adds), then the residual. Each product and sum is the one the torch ops
 * make, so the same numbers; one call instead of ~5 Python-level operations. Returns 0, or -1 (no memory). */
static int back(const float *h2, const float *a, const float *up, int64_t ld_up, int64_t q, int64_t I, int64_t d,
                int kind, const void *w, const float *dm, const float *lora_A, const float *lora_B, int64_t rank,
                int64_t n_main, const draft_args *dr, float *out, int threads) {
  float *m = KEPT(float, q * I), *y = KEPT(float, q * d);
  int failed = !m || !y;
  if (!failed) {
    for (int64_t i = 0; i < q; i++)
      for (int64_t j = 0; j < I; j++) m[i * I + j] = a[i * I + j] * up[i * ld_up + j];
    failed = dr ? lin_rows(kind, w, dm, (int)dr->down_kind, dr->down_w, dr->down_dm, dr->min_rows, m, q, n_main, I, d,
                           y, d, threads)
                : lin(kind, w, dm, m, q, I, d, y, d, threads);
    if (!failed && lora_A && n_main < q) failed = lora_add(m, q, n_main, I, lora_A, lora_B, rank, y, d, d, threads);
    if (!failed)
      for (int64_t i = 0; i < q * d; i++) out[i] = h2[i] + y[i];
  }
  return failed ? -1 : 0;
}
int layer_back(const float *h2, const float *a, const float *up, int64_t ld_up, int64_t q, int64_t I, int64_t d,
               int kind, const void *w, const float *dm, const float *lora_A, const float *lora_B, int64_t rank,
               int64_t n_main, float *out, int threads) {
  return back(h2, a, up, ld_up, q, I, d, kind, w, dm, lora_A, lora_B, rank, n_main, NULL, out, threads);
}

/* ---- torch's SiLU, and a whole layer's step -------------------------------------------------------------
 * y = x / (1 + e^-x) for rows q of n values (x's row stride ld, y contiguous), as torch's CPU silu kernel
 * computes it: along each row two vectors at a time through torch's own vector exp (`expv`: the Sleef function
 * its Vectorized<float>::exp calls, passed in from the loaded library), the rest one value at a time through
 * expf, as its scalar loop does. The same operations in the same order, so the same bits (checked at binding). */
typedef vec (*vexp_fn)(vec);
void silu_rows(const float *x, int64_t ld, int64_t q, int64_t n, float *y, const void *expv) {
  vexp_fn e = (vexp_fn)expv;
  for (int64_t i = 0; i < q; i++) {
    const float *r = x + i * ld;
    float *o = y + i * n;
    int64_t j = 0;
    for (; j + 2 * LANES <= n; j += 2 * LANES)
      for (int h = 0; h < 2; h++) {
        vec v = load_x(r + j + h * LANES, LANES);
        store_x(o + j + h * LANES, vdiv(v, vadd(vset1(1.0f), e(vneg(v)))), LANES);
      }
    for (; j < n; j++) o[j] = r[j] / (1.0f + expf(-r[j]));
  }
}

/* One sequence's decoding step through a whole Llama-form layer: layer_front (same arguments), SiLU on gate's
 * columns of its gate/up output (silu_rows), then layer_back with the down projection (down_kind, down_w,
 * down_dm; its stream-row adapter down_A, down_B of the front's rank and rows, or NULL). out [q, d]: the
 * layer's output. 0, or -1 (no memory, a head over MAX_D). */
static int layer_step(const float *h, int64_t q, int64_t d, const float *w1, const float *w2, float eps, int64_t n_qkv_parts,
               int64_t n_gu_parts, const int *kind, const void *const *w, const float *const *dm, const int64_t *n,
               int64_t H, int64_t Hkv, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
               int64_t cap, int64_t start, const int64_t *spec, const int64_t *keys, float scaling,
               const float *const *lora, int64_t rank, int64_t n_main, int down_kind, const void *down_w,
               const float *down_dm, const float *down_A, const float *down_B, const draft_args *dr,
               const void *expv, float *out, int threads) {
  int64_t n_gu = 0, o_at = n_qkv_parts;
  for (int64_t i = 0; i < n_gu_parts; i++) n_gu += n[o_at + 1 + i];
  int64_t I = n_gu / 2;
  float *h2 = KEPT(float, q * d), *gu = KEPT(float, q * n_gu);
  float *act = KEPT(float, q * I);
  int failed = !h2 || !gu || !act;
  if (!failed)
    failed = front(h, q, d, w1, w2, eps, n_qkv_parts, n_gu_parts, kind, w, dm, n, H, Hkv, D, cos, sin, k_cache,
                   v_cache, cap, start, spec, keys, scaling, h2, gu, lora, rank, n_main, lora ? dr : NULL, threads);
  if (!failed) {
    silu_rows(gu, n_gu, q, I, act, expv);
    failed = back(h2, act, gu + I, n_gu, q, I, d, down_kind, down_w, down_dm, lora ? down_A : NULL, down_B, rank,
                  lora ? n_main : q, lora ? dr : NULL, out, threads);
  }
  return failed ? -1 : 0;
}

/* ---- Consecutive layers in one call ------------------------------------------------------------------------
 * What layer_step takes of one layer that stays the same from step to step (`rowinv_steps.StackLayer` lays it out
 * alike), so that a step's run of layers is one call: layer_stack runs layer_step on each in turn, the output of
 * one the input of the next, with the step's RoPE tables, cache slots, keys and stream rows shared. */
typedef struct {
  const float *w1, *w2;
  float eps;
  int64_t n_qkv_parts, n_gu_parts;
  const int *kind;
  const void *const *w;
  const float *const *dm;
  const int64_t *n;
  const float *const *lora;
  int64_t rank, down_kind;
  const void *down_w;
  const float *down_dm, *down_A, *down_B;
  const draft_args *draft; /* NULL, or the layer's draft Linears for its stream rows */
} layer_args;

int layer_stack(int64_t L, const layer_args *const *layer, float *const *k_caches, float *const *v_caches,
                const float *h, int64_t q, int64_t d, int64_t H, int64_t Hkv, int64_t D, const float *cos,
                const float *sin, int64_t cap, int64_t start, const int64_t *spec, const int64_t *keys, float scaling,
                int64_t n_main, const void *expv, float *out, int threads) {
  float *buf = KEPT(float, q * d);
  int failed = !buf;
  const float *x = h;
  for (int64_t l = 0; l < L && !failed; l++) {
    const layer_args *a = layer[l];
    float *y = (L - 1 - l) % 2 ? buf : out; /* the last layer writes out; each writes where its input is not */
    failed = layer_step(x, q, d, a->w1, a->w2, a->eps, a->n_qkv_parts, a->n_gu_parts, a->kind, a->w, a->dm, a->n, H,
                        Hkv, D, cos, sin, k_caches[l], v_caches[l], cap, start, spec, keys, scaling, a->lora, a->rank,
                        n_main, (int)a->down_kind, a->down_w, a->down_dm, a->down_A, a->down_B, a->draft, expv, y,
                        threads);
    x = y;
  }
  return failed ? -1 : 0;
}

/* A speculative step's layers in one call, where msa.forward would make two layer_stack calls with Python between
 * them: the L1 lower layers on the n main rows (their output into mid: the rows the streams are born from), the
 * stream rows born as msa's _with_stream_rows makes them (row n + c gamma + j = mid[carriers[c]] + emb[j], one fp32
 * add each), then the L2 multi-stream layers on all q = n + s gamma rows (out [q, d]). Each run has its own RoPE
 * tables (cos1/sin1 [n, D], cos2/sin2 [q, D]), attention keys (spec, keys) and first stream row (n_main1, n_main2);
 * both write the cache at `start`. norm: NULL, or the model's final RMSNorm weight (eps), applied to out in place as
 * rmsnorm_f32 applies it. The same calls as two layer_stack calls and the norm's, so the same numbers. */
int stream_stack(int64_t L1, const layer_args *const *lower, float *const *k1, float *const *v1, int64_t L2,
                 const layer_args *const *upper, float *const *k2, float *const *v2, const float *h, int64_t n,
                 int64_t d, int64_t H, int64_t Hkv, int64_t D, const float *cos1, const float *sin1,
                 const int64_t *spec1, const int64_t *keys1, int64_t n_main1, const int64_t *carriers, int64_t s,
                 int64_t gamma, const float *emb, const float *cos2, const float *sin2, const int64_t *spec2,
                 const int64_t *keys2, int64_t n_main2, int64_t cap, int64_t start, float scaling, const void *expv,
                 const float *norm, float eps, float *mid, float *out, int threads) {
  int64_t q = n + s * gamma;
  float *x = KEPT(float, q * d);
  if (!x) return -1;
  if (layer_stack(L1, lower, k1, v1, h, n, d, H, Hkv, D, cos1, sin1, cap, start, spec1, keys1, scaling, n_main1, expv,
                  mid, threads))
    return -1;
  memcpy(x, mid, (size_t)(n * d) * sizeof(float));
  for (int64_t c = 0; c < s; c++)
    for (int64_t j = 0; j < gamma; j++) {
      const float *m = mid + carriers[c] * d, *e = emb + j * d;
      float *r = x + (n + c * gamma + j) * d;
      for (int64_t i = 0; i < d; i++) r[i] = m[i] + e[i];
    }
  if (layer_stack(L2, upper, k2, v2, x, q, d, H, Hkv, D, cos2, sin2, cap, start, spec2, keys2, scaling, n_main2, expv,
                  out, threads))
    return -1;
  if (norm) rmsnorm_f32(out, q, d, norm, eps, out); /* the model's final norm, row by row in place */
  return 0;
}

/* ---- bf16 on AMX tiles -------------------------------------------------------------------------------
 * y[M,N] = bf16(x)[M,K] W[N,K]^T with W bf16 and fp32 sums, on the tile unit of Intel CPUs with AMX-BF16 (built
 * where the CPU has it; rowinv_amx() says whether the OS lets this process use it). One TDPBF16PS multiplies up to
 * 16 rows by 32 columns of K against 16 outputs, 8,192 products, so up to 32 rows cost about what one does: the
 * pass stays bound by reading the weights where the vector kernels above run out of FMA units (a 25-row pass of
 * the top layers, a 5-row verification in bf16).
 * Row-invariant as the rest: x is rounded to bf16 one value at a time (to nearest, ties to even), and every output
 * y[m][n] is the tile unit's sum over K in blocks of 32, in order, whatever the other rows of the tile are. These
 * sums differ from linear_bf16's (those keep x in fp32), so a model takes one kind for all its passes.
 * Weights (`rowinv.amx_blocked`): N in blocks of 32 outputs, each block's K in steps of 32 columns, each step two
 * tiles (outputs 0-15, 16-31) of 16 pairs of columns x 16 outputs x the pair: Wx[N/32][K/32][2][16][16][2], one
 * sequential read a call. N and K multiples of 32. */
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <sys/syscall.h>
#include <unistd.h>
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;
static int amx_granted = -1;
int rowinv_amx(void) { /* 1 where this process may use the tile registers (Linux asks for them once) */
  if (amx_granted < 0) amx_granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return amx_granted;
}
/* tiles 0, 1: rows of x; 2, 3: weights; 4-7: sums (4, 5 of row tile 0). rb < 0: one row tile against two blocks
 * of outputs, tile 1 a third weight tile and 4-7 all sums of row tile 0 */
static void amx_configure(int ra, int rb) {
  tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  int rows[8] = {ra, rb, 16, 16, ra, ra, rb, rb};
  if (rb < 0) rows[1] = 16, rows[6] = rows[7] = ra;
  for (int t = 0; t < 8; t++) c.rows[t] = (uint8_t)rows[t], c.colsb[t] = rows[t] ? 64 : 0;
  _tile_loadconfig(&c);
}
/* x rounded to bf16, to nearest even (NaN is not expected of a hidden state) */
static inline __m256i bf16_words(__m512 x) { /* 16 floats rounded to bf16 (to nearest, ties to even), as 16 words */
  __m512i b = _mm512_castps_si512(x);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16));
}
static void to_bf16(const float *x, int64_t n, uint16_t *out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(out + i), bf16_words(_mm512_loadu_ps(x + i)));
  for (; i < n; i++) {
    uint32_t b;
    memcpy(&b, x + i, 4);
    out[i] = (uint16_t)((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
  }
}
static uint16_t *bf16_rows(size_t n) { /* this thread's buffer for x in bf16, or NULL */
  static __thread kept_buffer k;
  return at_least(&k, n * sizeof(uint16_t));
}
#define AMX_PF 4096 /* bytes of weights prefetched ahead */
/* the sums of row tile 0 (tiles t0, t0 + 1) and, where b, of row tile 1 (6, 7) into y0 */
static void bf16x_store(int b, int t0, float *y0, int64_t s0, int64_t l0) {
  if (t0 == 4) {
    _tile_stored(4, y0, s0);
    _tile_stored(5, y0 + 16, s0);
  } else {
    _tile_stored(6, y0, s0);
    _tile_stored(7, y0 + 16, s0);
  }
  if (b) {
    _tile_stored(6, y0 + 16 * l0, s0);
    _tile_stored(7, y0 + 16 * l0 + 16, s0);
  }
}
typedef struct { /* where a call's sums go (bf16x's y, ldy, cols, split, y2, ld2) */
  float *y;
  int64_t ldy;
  const int32_t *cols;
  int64_t split;
  float *y2;
  int64_t ld2;
} bf16x_out;
/* rows m0 .. m0 + rows of the call (x0, in bf16) against the outputs of blocks p, p + 1 (weights wp, then the next
 * block's): the sums of both blocks in flight at once, four tiles of them */
static void bf16x_two_blocks(const uint16_t *x0, int64_t sx, int64_t m0, int rows, const uint16_t *wp, int64_t steps,
                             int64_t p, const bf16x_out *o) {
  const uint16_t *wq = wp + steps * 1024;
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t s = 0; s < steps; s++) {
    const uint16_t *ws = wp + s * 1024, *wt = wq + s * 1024;
    for (int f = 0; f < 2048; f += 64) {
      _mm_prefetch((const char *)ws + AMX_PF + f, _MM_HINT_T0);
      _mm_prefetch((const char *)wt + AMX_PF + f, _MM_HINT_T0);
    }
    _tile_loadd(0, x0 + s * 32, sx);
    _tile_loadd(2, ws, 64);
    _tile_loadd(3, ws + 512, 64);
    _tile_loadd(1, wt, 64);
    _tile_dpbf16ps(4, 0, 2);
    _tile_dpbf16ps(5, 0, 3);
    _tile_dpbf16ps(6, 0, 1);
    _tile_loadd(2, wt + 512, 64);
    _tile_dpbf16ps(7, 0, 2);
  }
  float buf[16 * 32];
  for (int h = 0; h < 2; h++) {
    float *y0 = o->cols ? buf : o->y + m0 * o->ldy + (p + h) * 32;
    bf16x_store(0, h ? 6 : 4, y0, o->cols ? 32 * 4 : o->ldy * 4, 0);
    if (o->cols) scatter_cols(buf, 32, m0, rows, 32, (p + h) * 32, o->cols, o->split, o->y, o->ldy, o->y2, o->ld2);
  }
}
/* rows m0 .. m0 + a + b of the call (row tiles x0 and x1, b of them 0 or more) against the outputs of block p */
static void bf16x_one_block(const uint16_t *x0, const uint16_t *x1, int64_t sx, int64_t m0, int a, int b,
                            const uint16_t *wp, int64_t steps, int64_t p, const bf16x_out *o) {
  _tile_zero(4);
  _tile_zero(5);
  if (b) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int64_t s = 0; s < steps; s++) {
    const uint16_t *ws = wp + s * 1024;
    for (int f = 0; f < 2048; f += 64) _mm_prefetch((const char *)ws + AMX_PF + f, _MM_HINT_T0);
    _tile_loadd(0, x0 + s * 32, sx);
    _tile_loadd(2, ws, 64);
    _tile_loadd(3, ws + 512, 64);
    _tile_dpbf16ps(4, 0, 2);
    _tile_dpbf16ps(5, 0, 3);
    if (b) {
      _tile_loadd(1, x1 + s * 32, sx);
      _tile_dpbf16ps(6, 1, 2);
      _tile_dpbf16ps(7, 1, 3);
    }
  }
  float buf[32 * 32], *y0 = o->cols ? buf : o->y + m0 * o->ldy + p * 32;
  bf16x_store(b, 4, y0, o->cols ? 32 * 4 : o->ldy * 4, o->cols ? 32 : o->ldy);
  if (o->cols) scatter_cols(buf, 32, m0, a + b, 32, p * 32, o->cols, o->split, o->y, o->ldy, o->y2, o->ld2);
}
/* x W^T on tiles (W: amx_tiles.tiled). cols NULL: y[m, n] (row stride ldy); else rows m < split write y[m,
 * cols[n]] and the rest y2[m - split, n] (row stride ld2): an LM head laid out with one vocabulary's rows first
 * scores main rows over the whole vocabulary and stream rows over that one, in one read of the weights.
 * Up to 16 rows go against two blocks of 32 outputs at a time: four chains of sums in flight, where one block had
 * two (each TDPBF16PS waits for the last one into its sums, and with two chains the tile unit idled: SmolLM2's 30
 * layers in bf16, one thread, one row 20.2 -> 17.7 ms, 5 rows 20.4 -> 18.0, ad-hoc). 17 to 32 rows keep one block
 * a time against two row tiles (four chains already; the two blocks row tile by row tile, reading the weights
 * twice, measured no faster). The sums are the same either way. */
static int bf16x(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                 const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  if (M <= 0) return 0;
  uint16_t *xb = bf16_rows((size_t)(M * K));
  if (!xb || !rowinv_amx()) return -1;
  to_bf16(x, M * K, xb);
  int64_t pairs = N / 32, steps = K / 32, sx = K * 2;
  bf16x_out o = {y, ldy, cols, split, y2, ld2};
  _Pragma("omp parallel num_threads(threads)") {
    int ra = -1, rb = -1;
    _Pragma("omp for schedule(static)")
    for (int64_t q = 0; q < (pairs + 1) / 2; q++) { /* blocks p and p + 1 (the last may be alone) */
      int64_t p = 2 * q;
      int two = p + 1 < pairs;
      const uint16_t *wp = W + p * steps * 1024;
      for (int64_t m0 = 0; m0 < M; m0 += 32) { /* 32 rows at a time: two row tiles */
        int a = M - m0 < 16 ? (int)(M - m0) : 16, b = M - m0 - 16 <= 0 ? 0 : (M - m0 - 16 < 16 ? (int)(M - m0 - 16) : 16);
        const uint16_t *x0 = xb + m0 * K;
        if (two && !b) {
          if (a != ra || rb != -1) amx_configure(a, -1), ra = a, rb = -1;
          bf16x_two_blocks(x0, sx, m0, a, wp, steps, p, &o);
          continue;
        }
        if (a != ra || b != rb) amx_configure(a, b), ra = a, rb = b;
        for (int64_t pp = p; pp <= p + two; pp++)
          bf16x_one_block(x0, x0 + 16 * K, sx, m0, a, b, W + pp * steps * 1024, steps, pp, &o);
      }
    }
    if (ra >= 0) _tile_release();
  }
  return 0;
}
int linear_bf16x_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                    int threads) {
  return bf16x(x, M, K, W, N, y, ldy, NULL, 0, NULL, 0, threads);
}
int linear_bf16x_map(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                     const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  return bf16x(x, M, K, W, N, y, ldy, cols, split, y2, ld2, threads);
}

/* ---- Stream rows' attention on tiles ------------------------------------------------------------------
 * Stream rows only draft: no main row sees them, and verification reads the main rows alone. So their attention may
 * take another arithmetic than a main row's, and on the tile unit it costs a fraction of the vector code's: for each
 * key/value head, the scores of every stream row's query heads against keys 0 .. end as one tile product (bf16
 * operands, fp32 sums: the queries against the keys laid out as tiles, `tile_keys`), each query's softmax over the keys
 * its row sees (the others weigh 0; fp32), then the weighted values as another (the values laid out as tiles in pairs
 * of keys, `tile_values`). Rows are computed alone (a row's numbers depend on its own query and keys), but not as
 * attend_f32 computes them: for stream rows only. */
static inline __m512i bf16_pairs(const float *x) { /* x[0 .. 32) as 16 dwords: (x[2p], x[2p + 1]) in dword p */
  __m256i lo = bf16_words(_mm512_loadu_ps(x)), hi = bf16_words(_mm512_loadu_ps(x + 16));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
/* W = the keys k[0 .. end) (rows of D floats) as `linear_bf16x`'s weights [Np x D] (amx_tiles' layout), keys past
 * end zero: key j's pairs of columns go down the 16 rows of its tile, at column j % 16 */
static void tile_keys(const float *k, int64_t end, int64_t D, int64_t Np, uint16_t *W) {
  memset(W, 0, (size_t)(Np * D) * sizeof(uint16_t));
  const __m512i rows = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  int64_t steps = D / 32;
  for (int64_t j = 0; j < end; j++)
    for (int64_t st = 0; st < steps; st++) {
      uint16_t *tile = W + (((j / 32) * steps + st) * 2 + (j % 32) / 16) * 512;
      _mm512_i32scatter_epi32((void *)(tile + (j % 16) * 2), rows, bf16_pairs(k + j * D + st * 32), 4);
    }
}
/* W = the values' transpose [D x Kp] (amx_tiles' layout; keys past end zero): keys j, j + 1 side by side in the
 * dwords of one tile row, 16 columns of D at a time */
static void tile_values(const float *v, int64_t end, int64_t D, int64_t Kp, uint16_t *W) {
  memset(W, 0, (size_t)(Kp * D) * sizeof(uint16_t));
  int64_t steps = Kp / 32;
  for (int64_t j = 0; j < end; j += 2)
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
      __m512 a = _mm512_loadu_ps(v + j * D + d0);
      __m512 b = j + 1 < end ? _mm512_loadu_ps(v + (j + 1) * D + d0) : _mm512_setzero_ps();
      __m512i lo = _mm512_cvtepu16_epi32(bf16_words(a)), hi = _mm512_cvtepu16_epi32(bf16_words(b));
      uint16_t *row = W + (((d0 / 32) * steps + j / 32) * 2 + (d0 % 32) / 16) * 512 + ((j % 32) / 2) * 32;
      _mm512_storeu_si512((void *)row, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}
/* out[i - first, h] for stream rows i of the step (q [rows, Hq, D] at strides q_sr, q_sh; spec/keys as attend_f32
 * takes them; k, v: [Hkv, cap, D] rows of D floats at head stride kv_sh). Returns 0, -1 (no memory, no tiles) or -2
 * (a shape the tiles do not take: the caller runs attend_f32). */
int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads) {
  if (rows <= 0) return 0;
  if (D % 32 || Hq % Hkv || D > MAX_D) return -2;
  int64_t G = Hq / Hkv, M = rows * G, end = 0, most = 0;
  for (int64_t i = 0; i < rows; i++) { /* one past the last key any row sees (a row's list rises) */
    int64_t count = spec[2 * i];
    int64_t last = count == 0 ? -1 : (spec[2 * i + 1] < 0 ? count - 1 : keys[spec[2 * i + 1] + count - 1]);
    end = last + 1 > end ? last + 1 : end;
    most = count > most ? count : most;
  }
  int64_t Ep = (end + 31) / 32 * 32;
  if (Ep == 0) Ep = 32;
  float *x = KEPT(float, M * D), *sc = KEPT(float, M * Ep), *o = KEPT(float, M * D), *keep = KEPT(float, most + 1);
  float *inv = KEPT(float, M);
  uint16_t *kt = KEPT(uint16_t, Ep * D), *vt = KEPT(uint16_t, Ep * D);
  int64_t *run = KEPT(int64_t, rows);
  if (!x || !sc || !o || !keep || !inv || !kt || !vt || !run) return -1;
  for (int64_t i = 0; i < rows; i++) { /* how many of row i's keys are 0, 1, ... in order (a list rises: search) */
    const int64_t *kl = spec[2 * i + 1] < 0 ? NULL : keys + spec[2 * i + 1];
    int64_t lo = 0, hi = spec[2 * i];
    if (kl)
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (kl[mid] == mid) lo = mid + 1;
        else hi = mid;
      }
    run[i] = kl ? lo : spec[2 * i];
  }
  for (int64_t g = 0; g < Hkv; g++) {
    for (int64_t m = 0; m < M; m++) /* query head m % G of stream row m / G */
      memcpy(x + m * D, q + (m / G) * q_sr + (g * G + m % G) * q_sh, (size_t)D * sizeof(float));
    tile_keys(k + g * kv_sh, end, D, Ep, kt);
    if (linear_bf16x_ld(x, M, D, kt, Ep, sc, Ep, threads)) return -1;
    for (int64_t m = 0; m < M; m++) { /* sc row m: the scores of keys 0 .. Ep; only its row's keys count */
      int64_t i = m / G, count = spec[2 * i], r = run[i];
      const int64_t *kl = spec[2 * i + 1] < 0 ? NULL : keys + spec[2 * i + 1];
      float *s = sc + m * Ep;
      /* keys 0 .. r in order; the rest listed: kept, then put back after every other key is masked */
      for (int64_t t = r; t < count; t++) keep[t - r] = s[kl[t]];
      for (int64_t j = r; j < Ep; j++) s[j] = -INFINITY;
      for (int64_t t = r; t < count; t++) s[kl[t]] = keep[t - r];
      if (count == 0) {
        memset(s, 0, (size_t)Ep * sizeof(float));
        inv[m] = 0.0f;
        continue;
      }
      vec mx = vset1(-INFINITY);
      for (int64_t j = 0; j < Ep; j += LANES) mx = vmax(mx, load_x(s + j, LANES));
      float top = _mm512_reduce_max_ps(mx) * scaling;
      vec total = vzero();
      for (int64_t j = 0; j < Ep; j += LANES) {
        vec e = vexp(vsub(vmul(load_x(s + j, LANES), vset1(scaling)), vset1(top)));
        store_x(s + j, e, LANES);
        total = vadd(total, e);
      }
      inv[m] = 1.0f / _mm512_reduce_add_ps(total);
    }
    tile_values(v + g * kv_sh, end, D, Ep, vt);
    if (linear_bf16x_ld(sc, M, Ep, vt, D, o, D, threads)) return -1;
    for (int64_t m = 0; m < M; m++) { /* the weighted values over the weights' sum */
      float *y = out + ((m / G) * Hq + g * G + m % G) * D;
      for (int64_t d0 = 0; d0 < D; d0 += LANES)
        store_x(y + d0, vmul(load_x(o + m * D + d0, LANES), vset1(inv[m])), LANES);
    }
  }
  return 0;
}
#else
int rowinv_amx(void) { return 0; }
int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads) {
  (void)q, (void)q_sr, (void)q_sh, (void)k, (void)v, (void)kv_sh, (void)rows, (void)Hq, (void)Hkv, (void)D;
  (void)spec, (void)keys, (void)scaling, (void)out, (void)threads;
  return -2;
}
int linear_bf16x_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                    int threads) {
  (void)x, (void)M, (void)K, (void)W, (void)N, (void)y, (void)ldy, (void)threads;
  return -1;
}
int linear_bf16x_map(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                     const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  (void)x, (void)M, (void)K, (void)W, (void)N, (void)y, (void)ldy, (void)cols, (void)split, (void)y2, (void)ld2;
  (void)threads;
  return -1;
}
#endif
int linear_bf16x(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int threads) {
  return linear_bf16x_ld(x, M, K, W, N, y, N, threads);
}

/* ---- The arithmetic roof ----------------------------------------------------------------------------
 * n steps of 12 independent chains of vector FMAs (enough to keep every FMA unit busy through its latency):
 * timed by the caller, 12 n LANES fused multiply-adds. What this core's vector units can do at most, which
 * a library's matmul may not reach (MKL takes its AVX2 path on AMD CPUs). */
float fma_burn(int64_t n) {
  vec a[12], x = vset1(0.999999f), y = vset1(1e-7f);
  UNROLLED for (int i = 0; i < 12; i++) a[i] = vset1(0.001f * (float)i);
  for (int64_t k = 0; k < n; k++) {
    UNROLLED for (int i = 0; i < 12; i++) a[i] = vfmadd(a[i], x, y);
  }
  float total = 0.0f;
  for (int i = 0; i < 12; i++) total += hsum(a[i]);
  return total;
}

/* ---- Greedy choice ---------------------------------------------------------------------------------
 * out[r] = the index of row r's largest value, the first of equal ones: torch.argmax(x, -1) on rows of
 * logits, without its ~50 µs a vocabulary-wide row here. A row holding a NaN gets -1 (torch counts NaN as the
 * largest: the caller asks torch then). */
static int64_t argmax_row(const float *p, int64_t n) {
#if defined(__AVX512F__)
  if (n >= LANES) {
    __m512 m = _mm512_loadu_ps(p);
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
      __m512 v = _mm512_loadu_ps(p + i);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_max_ps(m, v);
    }
    float best = _mm512_reduce_max_ps(m);
    for (int64_t j = i; j < n; j++) {
      if (p[j] != p[j]) return -1;
      if (p[j] > best) best = p[j];
    }
    if (nan) return -1;
    __m512 b = _mm512_set1_ps(best);
    for (i = 0; i + LANES <= n; i += LANES) {
      __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + i), b, _CMP_EQ_OQ);
      if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
      if (p[i] == best) return i;
    return -1;
  }
#endif
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    if (p[i] != p[i]) return -1;
    if (p[i] > p[at]) at = i;
  }
  return at;
}

int argmax_rows(const float *x, int64_t rows, int64_t n, int64_t ld, int64_t *out) {
  for (int64_t r = 0; r < rows; r++) {
    out[r] = argmax_row(x + r * ld, n);
    if (out[r] < 0) return 1;
  }
  return 0;
}

/* ---- Candidates of a greedy choice (kernels/heads/certified_head.py) --------------------------------------------
 * Rows a[m, n] of approximate logits, each within r[i, v] of its exact logit, where
 *   r[i, v] = slack (sum_o dxo[i, o] l1[g_o, v] + rest[i] (tot[v] (1 + 2^-16) - sum_o l1[g_o, v])),
 * l1 [G, n]: each token's sum of |w| per input group, tot[v] = sum_g l1[g, v], g_o (o < k <= 4) the groups the
 * caller bounds one by one and rest[i] the largest dx of row i's other groups (the 2^-16 covers the subtraction's
 * rounding). Writes to cols, in order, every token v that some row's upper end a + r reaches that row's best lower
 * end max_v (a - r), and returns their count (the others cannot be any row's largest exact logit); -1: k > 4 or no
 * memory; -2: some a is not finite (the caller takes the whole head). */
#define CAND_GROUPS 4
static inline float cand_bound(const float *l1v[CAND_GROUPS], int64_t k, const float *dxo, float rest, float tot, int64_t v) {
  float part = 0.0f, rem = tot * (1.0f + 1.0f / 65536.0f);
  for (int64_t o = 0; o < k; o++) part = fmaf(dxo[o], l1v[o][v], part), rem -= l1v[o][v];
  return fmaf(rest, rem, part);
}
/* Tokens v0 .. v1 one at a time (a vector loop's tail, or builds without AVX-512): row i's best lower end raised
 * to them in *best (0), or -2 where some a is not finite */
static int floor_scalar(const float *a, int64_t n, const float *l1v[CAND_GROUPS], int64_t k, const float *dxo,
                        const float *rest, const float *tot, float slack, int64_t i, int64_t v0, int64_t v1, float *best) {
  for (int64_t v = v0; v < v1; v++) {
    if (!isfinite(a[i * n + v])) return -2;
    float lo = a[i * n + v] - slack * cand_bound(l1v, k, dxo + i * k, rest[i], tot[v], v);
    *best = lo > *best ? lo : *best;
  }
  return 0;
}
/* Tokens v0 .. v1 one at a time: those whose upper end reaches some row's floor appended to cols[count ..]; the
 * new count */
static int64_t mark_scalar(const float *a, int64_t m, int64_t n, const float *l1v[CAND_GROUPS], int64_t k,
                           const float *dxo, const float *rest, const float *tot, float slack, const float *floor_,
                           int64_t v0, int64_t v1, int32_t *cols, int64_t count) {
  for (int64_t v = v0; v < v1; v++)
    for (int64_t i = 0; i < m; i++)
      if (a[i * n + v] + slack * cand_bound(l1v, k, dxo + i * k, rest[i], tot[v], v) >= floor_[i]) {
        cols[count++] = (int32_t)v;
        break;
      }
  return count;
}
static int64_t greedy_candidates(const float *a, int64_t m, int64_t n, const float *l1, const float *tot, const int64_t *groups,
                                 int64_t k, const float *dxo, const float *rest, float slack, int32_t *cols) {
  if (k > CAND_GROUPS || k < 0) return -1;
  const float *l1v[CAND_GROUPS];
  for (int64_t o = 0; o < k; o++) l1v[o] = l1 + groups[o] * n;
  float *floor_ = KEPT(float, m);
  if (!floor_) return -1;
#if defined(__AVX512F__)
  const float widen = 1.0f + 1.0f / 65536.0f;
  int64_t n16 = n / LANES * LANES, count = 0;
  __mmask16 odd = 0; /* lanes where some a is not finite (a - a is NaN) */
  float *lanes_best = KEPT(float, m * LANES); /* each row's best lower ends, lane by lane */
  if (!lanes_best) return -1;
  for (int64_t i = 0; i < m; i++) _mm512_storeu_ps(lanes_best + i * LANES, _mm512_set1_ps(-INFINITY));
  for (int64_t v = 0; v < n16; v += LANES) { /* token chunks outside, rows inside: the table read once */
    __m512 rem = vmul(_mm512_loadu_ps(tot + v), vset1(widen));
    __m512 l[CAND_GROUPS];
    for (int64_t o = 0; o < k; o++) l[o] = _mm512_loadu_ps(l1v[o] + v), rem = vsub(rem, l[o]);
    for (int64_t i = 0; i < m; i++) {
      __m512 av = _mm512_loadu_ps(a + i * n + v), part = vzero();
      odd |= _mm512_cmp_ps_mask(vsub(av, av), vzero(), _CMP_NEQ_UQ);
      for (int64_t o = 0; o < k; o++) part = vfmadd(vset1(dxo[i * k + o]), l[o], part);
      __m512 lo = _mm512_fnmadd_ps(vset1(slack), vfmadd(vset1(rest[i]), rem, part), av);
      _mm512_storeu_ps(lanes_best + i * LANES, vmax(_mm512_loadu_ps(lanes_best + i * LANES), lo));
    }
  }
  for (int64_t i = 0; i < m; i++) {
    floor_[i] = _mm512_reduce_max_ps(_mm512_loadu_ps(lanes_best + i * LANES));
    if (floor_scalar(a, n, l1v, k, dxo, rest, tot, slack, i, n16, n, floor_ + i)) return -2;
  }
  if (odd) return -2;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t v = 0; v < n16; v += LANES) {
    __m512 rem = vmul(_mm512_loadu_ps(tot + v), vset1(widen));
    __m512 l[CAND_GROUPS];
    for (int64_t o = 0; o < k; o++) l[o] = _mm512_loadu_ps(l1v[o] + v), rem = vsub(rem, l[o]);
    __mmask16 hit = 0;
    for (int64_t i = 0; i < m && hit != 0xFFFF; i++) {
      __m512 part = vzero();
      for (int64_t o = 0; o < k; o++) part = vfmadd(vset1(dxo[i * k + o]), l[o], part);
      __m512 up = _mm512_fmadd_ps(vset1(slack), vfmadd(vset1(rest[i]), rem, part), _mm512_loadu_ps(a + i * n + v));
      hit |= _mm512_cmp_ps_mask(up, vset1(floor_[i]), _CMP_GE_OQ);
    }
    if (hit) {
      _mm512_mask_compressstoreu_epi32(cols + count, hit, _mm512_add_epi32(iota, _mm512_set1_epi32((int)v)));
      count += __builtin_popcount((unsigned)hit);
    }
  }
  return mark_scalar(a, m, n, l1v, k, dxo, rest, tot, slack, floor_, n16, n, cols, count);
#else
  for (int64_t i = 0; i < m; i++) {
    floor_[i] = -INFINITY;
    if (floor_scalar(a, n, l1v, k, dxo, rest, tot, slack, i, 0, n, floor_ + i)) return -2;
  }
  return mark_scalar(a, m, n, l1v, k, dxo, rest, tot, slack, floor_, 0, n, cols, 0);
#endif
}

/* Greedy choices of an exact 8-bit head (linear_q8's layout: wq [N' / 4, K / 32, 4, 32], ds [N' / 4, K / 32, 4, 1])
 * for rows x [m, K], from a[m, n], the same groups against x rounded to 8 bits (linear_q8a8), l1 [G, n] and tot [n]
 * (`greedy_candidates`): each row's scales dx (as quantize_q8 makes them), the `bounded` groups with the largest
 * scales over the rows bounded one by one, the candidates, then every candidate's exact logit from the kernel's own
 * block call on the block that holds it (the same sums as linear_q8 over the whole head, bit for bit) and each row's
 * first largest. out[i]: row i's token. Returns 0; -1: no memory; -2: x or a not finite (the caller takes the whole
 * head). */
int certified_choices(const float *x, int64_t m, int64_t K, const float *a, int64_t n, const float *l1,
                      const float *tot, int64_t bounded, float slack, const uint8_t *wq, const float *ds, int64_t *out) {
  int64_t G = K / QG, k = bounded < G ? bounded : G;
  if (k > CAND_GROUPS) k = CAND_GROUPS;
  float *dx = KEPT(float, m * G), *colmax = KEPT(float, G), *dxo = KEPT(float, m * CAND_GROUPS), *rest = KEPT(float, m);
  float *best = KEPT(float, m), *buf = KEPT(float, MBQ * NB);
  int32_t *cols = KEPT(int32_t, n);
  if (!dx || !colmax || !dxo || !rest || !best || !buf || !cols) return -1;
  for (int64_t g = 0; g < G; g++) colmax[g] = 0.0f;
  for (int64_t i = 0; i < m; i++)
    for (int64_t g = 0; g < G; g++) {
      float amax = 0.0f;
      for (int64_t j = 0; j < QG; j++) {
        float v = x[i * K + g * QG + j];
        if (!isfinite(v)) return -2;
        amax = fabsf(v) > amax ? fabsf(v) : amax;
      }
      dx[i * G + g] = amax / 127.0f;
      colmax[g] = dx[i * G + g] > colmax[g] ? dx[i * G + g] : colmax[g];
    }
  int64_t groups[CAND_GROUPS];
  for (int64_t o = 0; o < k; o++) { /* the k largest column maxima, first of equal ones */
    int64_t at = -1;
    for (int64_t g = 0; g < G; g++) {
      int taken = 0;
      for (int64_t p = 0; p < o; p++) taken |= groups[p] == g;
      if (!taken && (at < 0 || colmax[g] > colmax[at])) at = g;
    }
    groups[o] = at;
  }
  for (int64_t i = 0; i < m; i++) {
    rest[i] = 0.0f;
    for (int64_t g = 0; g < G; g++) {
      int taken = 0;
      for (int64_t o = 0; o < k; o++) taken |= groups[o] == g;
      if (!taken && dx[i * G + g] > rest[i]) rest[i] = dx[i * G + g];
    }
    for (int64_t o = 0; o < k; o++) dxo[i * k + o] = dx[i * G + groups[o]];
  }
  int64_t count = greedy_candidates(a, m, n, l1, tot, groups, k, dxo, rest, slack, cols);
  if (count < 0) return (int)count;
  for (int64_t i = 0; i < m; i++) best[i] = -INFINITY, out[i] = -1;
  for (int64_t c = 0; c < count;) {
    int64_t b = cols[c] / NB, c1 = c;
    while (c1 < count && cols[c1] / NB == b) c1++; /* the candidates in this block */
    for (int64_t m0 = 0; m0 < m; m0 += MBQ) {
      int64_t mm = m - m0 < MBQ ? m - m0 : MBQ;
      q8_blocks[mm](x + m0 * K, K, wq + b * NB * G * QG, ds + b * G * NB, G, buf, NB, NB);
      for (int64_t i = 0; i < mm; i++)
        for (int64_t t = c; t < c1; t++) {
          float v = buf[i * NB + cols[t] % NB];
          if (out[m0 + i] < 0 || v > best[m0 + i]) best[m0 + i] = v, out[m0 + i] = cols[t];
        }
    }
    c = c1;
  }
  return 0;
}

int rowinv_abi(void) { return 16; }
int rowinv_lanes(void) { return LANES; }
