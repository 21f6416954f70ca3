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
#include <stdint.h>
#include <string.h>

#define NB 4 /* output rows per block */

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

#define STEP(MM, LOAD, k, n)                                                                           \
  {                                                                                                    \
    vec a = LOAD(w0 + (k), n), b = LOAD(w1 + (k), n), c = LOAD(w2 + (k), n), d = LOAD(w3 + (k), n);    \
    _mm_prefetch((const char *)(w0 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w1 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w2 + NB * K + (k)), _MM_HINT_T0);                                      \
    _mm_prefetch((const char *)(w3 + NB * K + (k)), _MM_HINT_T0);                                      \
    for (int i = 0; i < MM; i++) {                                                                     \
      vec xv = load_x(x + i * K + (k), n);                                                             \
      acc[i][0] = vfmadd(xv, a, acc[i][0]);                                                            \
      acc[i][1] = vfmadd(xv, b, acc[i][1]);                                                            \
      acc[i][2] = vfmadd(xv, c, acc[i][2]);                                                            \
      acc[i][3] = vfmadd(xv, d, acc[i][3]);                                                            \
    }                                                                                                  \
  }

/* One block: MM input rows (a compile-time count, so the accumulators stay in registers) against nn <= 4
 * output rows starting at n0. Missing output rows read row n0 again and are not stored. */
#define DEFINE_BLOCK(NAME, WT, LOAD, MM)                                                               \
  static void NAME##_##MM(const float *x, int64_t K, const WT *W, int64_t n0, int64_t nn, float *y,     \
                          int64_t N) {                                                                 \
    vec acc[MM][NB];                                                                                   \
    for (int i = 0; i < MM; i++)                                                                       \
      for (int j = 0; j < NB; j++) acc[i][j] = vzero();                                                \
    const WT *w0 = W + n0 * K, *w1 = w0 + (nn > 1) * K, *w2 = w0 + (nn > 2) * 2 * K,                  \
             *w3 = w0 + (nn > 3) * 3 * K;                                                              \
    int64_t k = 0;                                                                                     \
    for (; k + LANES <= K; k += LANES) STEP(MM, LOAD, k, LANES)                                        \
    if (k < K) STEP(MM, LOAD, k, (int)(K - k))                                                         \
    for (int i = 0; i < MM; i++) {                                                                     \
      float out[NB];                                                                                   \
      _mm_storeu_ps(out, total4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));                          \
      memcpy(y + i * N + n0, out, (size_t)nn * sizeof(float));                                         \
    }                                                                                                  \
  }

#if MB == 6
#define DEFINE_BLOCKS(NAME, WT, LOAD)                                                                  \
  DEFINE_BLOCK(NAME, WT, LOAD, 1) DEFINE_BLOCK(NAME, WT, LOAD, 2) DEFINE_BLOCK(NAME, WT, LOAD, 3)      \
  DEFINE_BLOCK(NAME, WT, LOAD, 4) DEFINE_BLOCK(NAME, WT, LOAD, 5) DEFINE_BLOCK(NAME, WT, LOAD, 6)      \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, int64_t);  \
  static const NAME##_fn NAME##_blocks[MB + 1] = {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4, NAME##_5, NAME##_6};
#else
#define DEFINE_BLOCKS(NAME, WT, LOAD)                                                                  \
  DEFINE_BLOCK(NAME, WT, LOAD, 1) DEFINE_BLOCK(NAME, WT, LOAD, 2) DEFINE_BLOCK(NAME, WT, LOAD, 3)      \
  typedef void (*NAME##_fn)(const float *, int64_t, const WT *, int64_t, int64_t, float *, int64_t);  \
  static const NAME##_fn NAME##_blocks[MB + 1] = {0, NAME##_1, NAME##_2, NAME##_3};
#endif

#define DEFINE_KERNEL(NAME, WT, LOAD)                                                                  \
  DEFINE_BLOCKS(NAME, WT, LOAD)                                                                        \
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
int rowinv_lanes(void) { return LANES; }
