/* The row-invariant CPU kernel's one header: what its sources share (the build's vector type and its helpers, the
 * fold that sums a Linear's lanes, scratch buffers, the return codes, the layer steps' structures) and every
 * function the library exports. The sources, all built into one library (kernels/builder.py):
 *   linear.c       fp32 and bf16 Linears, row-major and blocked
 *   quant.c        4-bit and 8-bit weights, against fp32 rows and (AVX512-VNNI) against 8-bit rows
 *   amx.c          bf16 on AMX tiles, and stream rows' attention on tiles
 *   attention.c    row-exact attention
 *   rowwise.c      RMSNorm, RoPE and the cache write, SiLU
 *   layer_steps.c  a decoding step's layer (and runs of layers) in one call
 *   argmax.c       the greedy choice, and the candidates of an exact 8-bit head
 *   clock.c        the layer steps' clock (pass-cost's breakdown; off by default)
 *
 * Row-invariant small-batch Linears for the CPU: y[M,N] = x[M,K] W[N,K]^T, fp32 sums. Built for AVX-512
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
#ifndef ROWINV_H
#define ROWINV_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bumped whenever an exported function's signature or a structure below changes (kernels/library.py checks it) */
#define ROWINV_ABI 19

/* What the calls that can fail return (kernels/library.py's Status names them alike) */
enum {
  RI_OK = 0,
  RI_NO_MEMORY = 1,  /* a scratch buffer could not be had */
  RI_NO_FEATURE = 2, /* this build or this process lacks the instructions (AVX512-VNNI, AMX tiles) */
  RI_BAD_SHAPE = 3,  /* a shape the call does not take (a head over MAX_D, a rank over LORA_MAX_RANK ...) */
  RI_NOT_FINITE = 4  /* an input holds a NaN or an infinity (the caller asks torch then) */
};

/* Functions one source defines for another, kept out of the library's exports */
#define RI_HIDDEN __attribute__((visibility("hidden")))

/* The layer steps' clock (clock.c, kernel_clock): seconds by section (CLK_MAIN: layers of main rows only; CLK_STREAM:
 * layers with stream rows) and part; CLOCK_START / CLOCK_ADD time a stretch where the clock is on. */
enum { CLK_MAIN = 0, CLK_STREAM = 1, CLK_SECTIONS = 2 };
enum { CLK_LINEARS = 0, CLK_ATTENTION = 1, CLK_ADAPTERS = 2, CLK_LAYERS = 3, CLK_PARTS = 4 };
extern RI_HIDDEN int ri_clock_on;
extern RI_HIDDEN double ri_clock[CLK_SECTIONS][CLK_PARTS];
RI_HIDDEN double ri_now(void);
#define CLOCK_START double clock_t0_ = ri_clock_on ? ri_now() : 0.0
#define CLOCK_ADD(section, part) \
  do { if (ri_clock_on) ri_clock[section][part] += ri_now() - clock_t0_; } while (0)

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

/* ---- Vector operations of attention, norms and the layer steps ------------------------------------------ */
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

#ifndef L2_AHEAD /* bytes ahead the weights are also prefetched into L2 (0: not); the build sets it per CPU vendor */
#define L2_AHEAD 0 /* (builder.py: 16384 on Intel; blocked fp32/bf16 and the 8-bit-activation kernels) */
#endif
/* Calls of WIDE_ROWS rows or more are a prompt's: the blocked Linears (linear.c) and the 8-bit-activation ones
 * (quant.c) take them their own way, with the same sums */
#define WIDE_ROWS 32

/* A thread's buffer of at least `bytes` (grown, kept for the thread's next calls), or NULL */
typedef struct {
  void *buf;
  size_t cap;
} kept_buffer;
static inline void *at_least(kept_buffer *k, size_t bytes) {
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

/* ---- Grouped-integer weights (quant.c) ---------------------------------------------------------------- */
#define QG 32 /* weights a group */
#if defined(__AVX512F__)
#define MBQ 6 /* 6 x 4 accumulators + 4 x 2 weights + 1 input: 33 of 32 registers, yet the fastest measured */
#else
#define MBQ 4 /* measured: 2 to 6 rows per block differ by a few percent either way on Zen 3 and Zen 4 */
#endif
/* MBQ rows or fewer of a block of 4 outputs (quant.c's DEFINE_QBLOCK), by row count: q8_blocks[mm] */
typedef void (*q_fn)(const float *, int64_t, const uint8_t *, const float *, int64_t, float *, int64_t, int64_t);
RI_HIDDEN extern const q_fn q4_blocks[7], q8_blocks[7];
RI_HIDDEN void linear_q(const q_fn *blocks, int64_t GB, int64_t S, const float *x, int64_t M, int64_t K,
                        const uint8_t *wq, const float *ds, int64_t N, float *y, int64_t ldy, int threads);
#if defined(__AVX512F__)
RI_HIDDEN void scatter_cols(const float *buf, int64_t lb, int64_t m0, int rows, int width, int64_t n0,
                            const int32_t *cols, int64_t split, float *y, int64_t ldy, float *y2, int64_t ld2);
#endif

/* ---- fp32 and bf16 Linears (linear.c): row m of y at y + m * ldy --------------------------------------- */
RI_HIDDEN void linear_f32_ld(const float *x, int64_t M, int64_t K, const float *W, int64_t N, float *y, int64_t ldy,
                             int threads);
RI_HIDDEN void linear_bf16_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y,
                              int64_t ldy, int threads);
RI_HIDDEN void linear_f32b_ld(const float *x, int64_t M, int64_t K, const float *W, int64_t N, float *y, int64_t ldy,
                              int threads);
RI_HIDDEN void linear_bf16b_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y,
                               int64_t ldy, int threads);

/* ---- RoPE of the first R dimensions of each head (rowwise.c; rope_store: R = D) ---------------------------- */
RI_HIDDEN void rope_store_r(const float *qkv, int64_t B, int64_t q, int64_t H, int64_t Hkv, int64_t D, int64_t R,
                            const float *cos, const float *sin, float *q_out, float *k_cache, float *v_cache, int64_t cap,
                            int64_t start);

/* ---- The layer steps' structures (kernels/library.py mirrors each as a ctypes.Structure) ---------------
 * The kinds of a layer's Linears (layer_steps.c's `lin`): LIN_F32, LIN_BF16: weight [N, K]; LIN_F32B, LIN_BF16B: the
 * same weights blocked; LIN_Q4: `linear_q4`'s nibbles and scales; LIN_Q4A8: `linear_q4a8_ld`'s; LIN_BF16X: bf16 on AMX
 * tiles (`linear_bf16x_ld`). */
enum { LIN_F32 = 0, LIN_BF16 = 1, LIN_Q4 = 2, LIN_F32B = 3, LIN_BF16B = 4, LIN_Q4A8 = 5, LIN_BF16X = 6 };
/* set in an adapter's rank: its A and B are bf16 AMX tiles (layer_steps.c's lora_add) */
#define LORA_TILES ((int64_t)1 << 32)

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

/* What a step takes of one layer that stays the same from step to step (`library.LayerArgs` mirrors it,
 * `rowinv_steps.stack_layer` fills it): its norms, its Linears (the front's parts, then down), its row adapters and
 * its draft Linears. layer_front reads the norms, the front's parts and the adapters; a whole layer's step all. */
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
  /* the layer's form where it is not Llama's (all zero / NULL: Llama's): */
  const float *q_norm, *k_norm; /* NULL, or RMSNorms of q and of k before RoPE (qk_norm): Qwen3, OLMo 2 */
  float qk_eps;
  int64_t qk_whole;   /* 0: q_norm, k_norm [D] over each head (Qwen3); 1: [H D], [Hkv D] over the whole projection (OLMo 2) */
  int64_t post_norms; /* 0: w1, w2 normalize the attention's and the MLP's inputs (Llama); 1: their outputs, before each
                         residual add (OLMo 2) */
  int64_t lora_fused; /* 0: lora holds the adapters of q, k, v, o, gate, up; 1: of q/k/v, o, gate/up as one Linear each
                         (Phi-3's qkv_proj and gate_up_proj) */
} layer_args;

/* What every layer of one step shares: its rows, the model's shape, the RoPE tables, where the cache is written,
 * what each row's attention sees, the first stream row and the threads. */
typedef struct {
  int64_t q, d;               /* the step's rows; the model's width */
  int64_t H, Hkv, D;          /* query heads, key/value heads, head size */
  const float *cos, *sin;     /* RoPE tables [q, D] */
  int64_t cap, start;         /* the caches' capacity; the first slot the step writes */
  const int64_t *spec, *keys; /* the keys each row sees (attend_f32) */
  float scaling;              /* attention's */
  int64_t n_main;             /* the first stream row (rows from there on get the adapters' deltas); q: none */
  const void *expv;           /* torch's vector exp (silu_rows), for whole layers; NULL for layer_front */
  int64_t threads;
  int64_t R;                  /* the dimensions of a head RoPE rotates (cos, sin: [q, R]), the rest passed as they are
                                 (Phi-4-mini's partial rotary: 96 of 128); 0: all D */
} step_args;

/* A run of consecutive layers in one call: the step, the layers' count and arguments, and their caches
 * ([Hkv, cap, D] buffers, one pair a layer) */
typedef struct {
  step_args step;
  int64_t count;
  const layer_args *const *layers;
  float *const *k_caches, *const *v_caches;
} layer_run;

/* ---- What the library exports (kernels/library.py's SIGNATURES types each) ---------------------------- */
int rowinv_abi(void);
int rowinv_lanes(void);
int64_t rowinv_span(int64_t K);
void linear_f32(const float *x, int64_t M, int64_t K, const float *W, int64_t N, float *y, int threads);
void linear_bf16(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int threads);
void linear_f32b(const float *x, int64_t M, int64_t K, const float *W, int64_t N, float *y, int threads);
void linear_bf16b(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int threads);
void linear_q4(const float *x, int64_t M, int64_t K, const uint8_t *wq, const float *dm, int64_t N, float *y,
               int threads);
void linear_q8(const float *x, int64_t M, int64_t K, const uint8_t *wq, const float *d, int64_t N, float *y,
               int threads);
int rowinv_a8(void);
int linear_q4a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads);
int linear_q8a8_ld(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                   int64_t ldy, int threads);
int linear_q8a8_map(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *dm, int64_t N, float *y,
                    int64_t ldy, const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads);
int rowinv_amx(void);
int linear_bf16x(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int threads);
int linear_bf16x_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                    int threads);
int linear_bf16x_map(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                     const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads);
int attend_f32(const float *q, int64_t q_sr, int64_t q_sh, const float *k, int64_t k_sr, int64_t k_sh,
               const float *v, int64_t v_sr, int64_t v_sh, int64_t rows, int64_t Hq, int64_t Hkv, int64_t D,
               const int64_t *spec, const int64_t *keys, float scaling, float *out, int threads);
int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads);
int attend_tiles_rows(void);
int64_t mask_keys(const float *mask, int64_t ld, int64_t q, int64_t keys, int64_t *spec, int64_t *list);
void rmsnorm_f32(const float *x, int64_t rows, int64_t d, const float *w, float eps, float *y);
void rope_store(const float *qkv, int64_t B, int64_t q, int64_t H, int64_t Hkv, int64_t D, const float *cos,
                const float *sin, float *q_out, float *k_cache, float *v_cache, int64_t cap, int64_t start);
void qk_norm(float *qkv, int64_t q, int64_t ld, int64_t H, int64_t Hkv, int64_t D, const float *q_w, const float *k_w,
             float eps, int64_t whole);
void silu_rows(const float *x, int64_t ld, int64_t q, int64_t n, float *y, const void *expv);
int lora_rows(const float *x, int64_t m, int64_t K, const uint16_t *At, const uint16_t *Bt, int64_t r, int64_t N,
              float *delta, int threads);
int layer_front(const layer_args *layer, const step_args *step, const float *h, float *k_cache, float *v_cache,
                float *h2, float *gu);
int layer_back(const float *h2, const float *a, const float *up, int64_t ld_up, int64_t q, int64_t I, int64_t d,
               int kind, const void *w, const float *dm, const float *lora_A, const float *lora_B, int64_t rank,
               int64_t n_main, float *out, int threads);
int layer_stack(const layer_run *run, const float *h, float *out);
int stream_stack(const layer_run *lower, const layer_run *upper, const float *h, const int64_t *carriers, int64_t s,
                 int64_t gamma, const float *emb, const float *norm, float eps, float *mid, float *out);
int argmax_rows(const float *x, int64_t rows, int64_t n, int64_t ld, int64_t *out);
void embed_q8a8(const int64_t *ids, int64_t m, int64_t K, const int8_t *w, const uint16_t *dm, const int64_t *stored,
                float *out);
void kernel_clock(int on, double *out);
int certified_choices(const float *x, int64_t m, int64_t K, const float *a, int64_t n, const float *l1,
                      const float *tot, int64_t bounded, float slack, const uint8_t *wq, const float *ds, int64_t *out);

#endif
