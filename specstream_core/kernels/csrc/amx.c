/* bf16 on AMX tiles (linear_bf16x, linear_bf16x_ld, linear_bf16x_map), and stream rows' attention on tiles
 * (attend_tiles); in builds without AMX, stubs that say so (RI_NO_FEATURE).
 *
 * y[M,N] = bf16(x)[M,K] W[N,K]^T with W bf16 and fp32 sums, on the tile unit of Intel CPUs with AMX-BF16 (built
 * where the CPU has it; rowinv_amx() says whether the OS lets this process use it). One TDPBF16PS multiplies up to
 * 16 rows by 32 columns of K against 16 outputs, 8,192 products, so up to 32 rows cost about what one does: the
 * pass stays bound by reading the weights where the vector kernels (linear.c) run out of FMA units (a 25-row pass of
 * the top layers, a 5-row verification in bf16).
 * Row-invariant as the rest: x is rounded to bf16 one value at a time (to nearest, ties to even), and every output
 * y[m][n] is the tile unit's sum over K in blocks of 32, in order, whatever the other rows of the tile are. These
 * sums differ from linear_bf16's (those keep x in fp32), so a model takes one kind for all its passes.
 * Weights (`rowinv.amx_blocked`): N in blocks of 32 outputs, each block's K in steps of 32 columns, each step two
 * tiles (outputs 0-15, 16-31) of 16 pairs of columns x 16 outputs x the pair: Wx[N/32][K/32][2][16][16][2], one
 * sequential read a call. N and K multiples of 32. */
#include "rowinv.h"

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
  if (M <= 0) return RI_OK;
  uint16_t *xb = bf16_rows((size_t)(M * K));
  if (!xb) return RI_NO_MEMORY;
  if (!rowinv_amx()) return RI_NO_FEATURE;
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
  return RI_OK;
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
 * takes them; k, v: [Hkv, cap, D] rows of D floats at head stride kv_sh). Returns RI_OK, RI_NO_MEMORY, RI_NO_FEATURE
 * (no tiles here) or RI_BAD_SHAPE (a shape the tiles do not take: the caller runs attend_f32). */
int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads) {
  if (rows <= 0) return RI_OK;
  if (D % 32 || Hq % Hkv || D > MAX_D) return RI_BAD_SHAPE;
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
  if (!x || !sc || !o || !keep || !inv || !kt || !vt || !run) return RI_NO_MEMORY;
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
    int failed = linear_bf16x_ld(x, M, D, kt, Ep, sc, Ep, threads);
    if (failed) return failed;
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
    failed = linear_bf16x_ld(sc, M, Ep, vt, D, o, D, threads);
    if (failed) return failed;
    for (int64_t m = 0; m < M; m++) { /* the weighted values over the weights' sum */
      float *y = out + ((m / G) * Hq + g * G + m % G) * D;
      for (int64_t d0 = 0; d0 < D; d0 += LANES)
        store_x(y + d0, vmul(load_x(o + m * D + d0, LANES), vset1(inv[m])), LANES);
    }
  }
  return RI_OK;
}
#else
int rowinv_amx(void) { return 0; }
int attend_tiles(const float *q, int64_t q_sr, int64_t q_sh, const float *k, const float *v, int64_t kv_sh,
                 int64_t rows, int64_t Hq, int64_t Hkv, int64_t D, const int64_t *spec, const int64_t *keys,
                 float scaling, float *out, int threads) {
  (void)q, (void)q_sr, (void)q_sh, (void)k, (void)v, (void)kv_sh, (void)rows, (void)Hq, (void)Hkv, (void)D;
  (void)spec, (void)keys, (void)scaling, (void)out, (void)threads;
  return RI_NO_FEATURE;
}
int linear_bf16x_ld(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                    int threads) {
  (void)x, (void)M, (void)K, (void)W, (void)N, (void)y, (void)ldy, (void)threads;
  return RI_NO_FEATURE;
}
int linear_bf16x_map(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int64_t ldy,
                     const int32_t *cols, int64_t split, float *y2, int64_t ld2, int threads) {
  (void)x, (void)M, (void)K, (void)W, (void)N, (void)y, (void)ldy, (void)cols, (void)split, (void)y2, (void)ld2;
  (void)threads;
  return RI_NO_FEATURE;
}
#endif
int linear_bf16x(const float *x, int64_t M, int64_t K, const uint16_t *W, int64_t N, float *y, int threads) {
  return linear_bf16x_ld(x, M, K, W, N, y, N, threads);
}
