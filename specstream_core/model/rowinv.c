/* Row-invariant small-batch Linears for the CPU (AVX-512): y[M,N] = x[M,K] W[N,K]^T, fp32 sums.
 *
 * Every output y[m][n] is summed in one fixed order (16 lanes along K, then a fixed fold of the lanes),
 * whatever M is, whichever block row m falls in and however many threads run: a row's result does not
 * depend on the other rows of its call. Speculative decoding relies on it: a pass that verifies five
 * tokens computes each of them bit for bit as a one-token pass would.
 *
 * The weights stream from memory once per call (4 output rows at a time, up to 6 input rows against
 * them from registers), so a few rows cost little more than one: decoding is bound by reading weights.
 * W is fp32 (linear_f32) or bf16 (linear_bf16: half the bytes, widened to fp32 in registers). */
#include <immintrin.h>
#include <stdint.h>

#define NB 4  /* output rows per block */
#define MB 6  /* input rows per block: 6 x 4 accumulators + 4 weights + 1 input = 29 of 32 registers */

static inline __m128 fold(__m512 v) { /* 16 lanes -> 4: (l + l+8) + (l+4), the same for every output */
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

static inline __m128 total4(__m512 a, __m512 b, __m512 c, __m512 d) { /* lane j: the sum of the j-th vector */
  __m128 r0 = fold(a), r1 = fold(b), r2 = fold(c), r3 = fold(d);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  return _mm_add_ps(_mm_add_ps(_mm_add_ps(r0, r1), r2), r3);
}

static inline __m512 load_f32(const float *w, __mmask16 m) { return _mm512_maskz_loadu_ps(m, w); }
static inline __m512 load_bf16(const uint16_t *w, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define STEP(MM, LOAD, k, mask)                                                                        \
  {                                                                                                    \
    __m512 a = LOAD(w0 + (k), mask), b = LOAD(w1 + (k), mask), c = LOAD(w2 + (k), mask),              \
           d = LOAD(w3 + (k), mask);                                                                   \
    _mm_prefetch((const char *)(w0 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w1 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w2 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w3 + NB * K + (k)), _MM_HINT_T0);                                      \
    for (int i = 0; i < MM; i++) {                                                                     \
      __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * K + (k));                                        \
      acc[i][0] = _mm512_fmadd_ps(xv, a, acc[i][0]);                                                   \
      acc[i][1] = _mm512_fmadd_ps(xv, b, acc[i][1]);                                                   \
      acc[i][2] = _mm512_fmadd_ps(xv, c, acc[i][2]);                                                   \
      acc[i][3] = _mm512_fmadd_ps(xv, d, acc[i][3]);                                                   \
    }                                                                                                  \
  }

/* One block: MM input rows (a compile-time count, so the accumulators stay in registers) against nn <= 4
 * output rows starting at n0. Missing output rows read row n0 again and are not stored. */
#define DEFINE_BLOCK(NAME, WT, LOAD, MM)                                                               \
  static void NAME##_##MM(const float *x, int64_t K, const WT *W, int64_t n0, int64_t nn, float *y,     \
                          int64_t N) {                                                                 \
    __m512 acc[MM][NB];                                                                                \
    for (int i = 0; i < MM; i++)                                                                       \
      for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();                                    \
    const WT *w0 = W + n0 * K, *w1 = w0 + (nn > 1) * K, *w2 = w0 + (nn > 2) * 2 * K,                  \
             *w3 = w0 + (nn > 3) * 3 * K;                                                              \
    int64_t k = 0;                                                                                     \
    for (; k + 16 <= K; k += 16) STEP(MM, LOAD, k, (__mmask16)0xFFFF)                                  \
    if (k < K) STEP(MM, LOAD, k, (__mmask16)((1u << (K - k)) - 1))                                     \
    __mmask8 keep = (__mmask8)((1u << nn) - 1);                                                        \
    for (int i = 0; i < MM; i++)                                                                       \
      _mm_mask_storeu_ps(y + i * N + n0, keep, total4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));    \
  }

#define DEFINE_KERNEL(NAME, WT, LOAD)                                                                  \
  DEFINE_BLOCK(NAME, WT, LOAD, 1) DEFINE_BLOCK(NAME, WT, LOAD, 2) DEFINE_BLOCK(NAME, WT, LOAD, 3)      \
  DEFINE_BLOCK(NAME, WT, LOAD, 4) DEFINE_BLOCK(NAME, WT, LOAD, 5) DEFINE_BLOCK(NAME, WT, LOAD, 6)      \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, int64_t);  \
  static const NAME##_fn NAME##_blocks[MB + 1] = {0,         NAME##_1, NAME##_2, NAME##_3,             \
                                                 NAME##_4,  NAME##_5, NAME##_6};                       \
  void NAME(const float *x, int64_t M, int64_t K, const WT *W, int64_t N, float *y, int threads) {    \
    int64_t blocks = (N + NB - 1) / NB;                                                                \
    _Pragma("omp parallel for schedule(static) num_threads(threads)")                                  \
    for (int64_t b = 0; b < blocks; b++) {                                                             \
      int64_t n0 = b * NB, nn = N - n0 < NB ? N - n0 : NB;                                             \
      for (int64_t m0 = 0; m0 < M; m0 += MB) {                                                         \
        int64_t mm = M - m0 < MB ? M - m0 : MB;                                                        \
        NAME##_blocks[mm](x + m0 * K, K, W, n0, nn, y + m0 * N, N);                                   \
      }                                                                                                \
    }                                                                                                  \
  }

DEFINE_KERNEL(linear_f32, float, load_f32)
DEFINE_KERNEL(linear_bf16, uint16_t, load_bf16)

int rowinv_abi(void) { return 1; }
