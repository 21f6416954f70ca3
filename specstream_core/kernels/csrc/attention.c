/* Row-exact attention (attend_f32), and the keys of an additive mask as it takes them (mask_keys).
 * out[i, h] = softmax(scaling * q[i, h] . k[j]) . v[j] over exactly the keys j row i may see, for query
 * rows i and query heads h (key/value head h / (Hq / Hkv): grouped-query attention without copies).
 * Each (row, head) is computed alone, in one fixed order that depends only on its own keys: a row's
 * result is the same whether the call holds one row (plain decoding) or many (a speculative pass). */
#include "rowinv.h"

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
 * out: [rows, Hq, D] contiguous. Returns RI_OK, RI_BAD_SHAPE (a head over MAX_D, Hq not a multiple of Hkv) or RI_NO_MEMORY. */
int attend_f32(const float *q, int64_t q_sr, int64_t q_sh, const float *k, int64_t k_sr, int64_t k_sh,
               const float *v, int64_t v_sr, int64_t v_sh, int64_t rows, int64_t Hq, int64_t Hkv, int64_t D,
               const int64_t *spec, const int64_t *keys, float scaling, float *out, int threads) {
  if (D > MAX_D || Hq % Hkv) return RI_BAD_SHAPE;
  int64_t most = 0;
  for (int64_t i = 0; i < rows; i++) most = spec[2 * i] > most ? spec[2 * i] : most;
  int failed = 0;
  int64_t pairs = (rows + 1) / 2, *common = KEPT(int64_t, pairs + 1);
  if (!common) return RI_NO_MEMORY;
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
  return failed ? RI_NO_MEMORY : RI_OK;
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
