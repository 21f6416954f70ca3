/* fp32 and bf16 Linears: y[M,N] = x[M,K] W[N,K]^T with W row-major (linear_f32, linear_bf16) or blocked
 * (linear_f32b, linear_bf16b), fp32 sums in one fixed order whatever M is (rowinv.h). */
#include "rowinv.h"

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
  RI_HIDDEN void NAME##_ld(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int64_t ldy, \
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
#define KSPAN 384
/* Calls of WIDE_ROWS rows or more (a prompt) run a panel of PANEL blocks at a time, each group of MB rows against
 * the panel's blocks in turn: the group's inputs stay in L1 across the panel and the panel's weights in L2 across
 * the groups; the weights are not prefetched (they are read again from L2, not streamed). The same FMAs on every
 * accumulator in the same order, so the same sums. SmolLM2's shapes, a 202-row prompt, one thread, on the Xeon
 * host (ad-hoc, GFLOP/s): 576 -> 1536 114 -> 131, 1536 -> 576 84 -> 117, 576 -> 576 118 -> 138. */
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
  RI_HIDDEN void NAME##_ld(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int64_t ldy, \
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

int rowinv_abi(void) { return ROWINV_ABI; }
int rowinv_lanes(void) { return LANES; }
