/* The greedy choice (argmax_rows), and the greedy choices of an exact 8-bit head from its candidates
 * (certified_choices).
 *
 * out[r] = the index of row r's largest value, the first of equal ones: torch.argmax(x, -1) on rows of
 * logits, without its ~50 µs a vocabulary-wide row here. A row holding a NaN gets -1 and the call returns
 * RI_NOT_FINITE (torch counts NaN as the largest: the caller asks torch then). */
#include "rowinv.h"

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
    if (out[r] < 0) return RI_NOT_FINITE;
  }
  return RI_OK;
}

/* ---- Candidates of a greedy choice (kernels/heads/certified_head.py) --------------------------------------------
 * Rows a[m, n] of approximate logits, each within r[i, v] of its exact logit, where
 *   r[i, v] = slack (sum_o dxo[i, o] l1[g_o, v] + rest[i] (tot[v] (1 + 2^-16) - sum_o l1[g_o, v])),
 * l1 [G, n]: each token's sum of |w| per input group, tot[v] = sum_g l1[g, v], g_o (o < k <= 4) the groups the
 * caller bounds one by one and rest[i] the largest dx of row i's other groups (the 2^-16 covers the subtraction's
 * rounding). Writes to cols, in order, every token v that some row's upper end a + r reaches that row's best lower
 * end max_v (a - r), and returns their count (the others cannot be any row's largest exact logit), or minus a code:
 * -RI_BAD_SHAPE (k > 4), -RI_NO_MEMORY, -RI_NOT_FINITE (some a is not finite: the caller takes the whole head). */
#define CAND_GROUPS 4
static inline float cand_bound(const float *l1v[CAND_GROUPS], int64_t k, const float *dxo, float rest, float tot, int64_t v) {
  float part = 0.0f, rem = tot * (1.0f + 1.0f / 65536.0f);
  for (int64_t o = 0; o < k; o++) part = fmaf(dxo[o], l1v[o][v], part), rem -= l1v[o][v];
  return fmaf(rest, rem, part);
}
/* Tokens v0 .. v1 one at a time (a vector loop's tail, or builds without AVX-512): row i's best lower end raised
 * to them in *best (RI_OK), or RI_NOT_FINITE where some a is not finite */
static int floor_scalar(const float *a, int64_t n, const float *l1v[CAND_GROUPS], int64_t k, const float *dxo,
                        const float *rest, const float *tot, float slack, int64_t i, int64_t v0, int64_t v1, float *best) {
  for (int64_t v = v0; v < v1; v++) {
    if (!isfinite(a[i * n + v])) return RI_NOT_FINITE;
    float lo = a[i * n + v] - slack * cand_bound(l1v, k, dxo + i * k, rest[i], tot[v], v);
    *best = lo > *best ? lo : *best;
  }
  return RI_OK;
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
  if (k > CAND_GROUPS || k < 0) return -RI_BAD_SHAPE;
  const float *l1v[CAND_GROUPS];
  for (int64_t o = 0; o < k; o++) l1v[o] = l1 + groups[o] * n;
  float *floor_ = KEPT(float, m);
  if (!floor_) return -RI_NO_MEMORY;
#if defined(__AVX512F__)
  const float widen = 1.0f + 1.0f / 65536.0f;
  int64_t n16 = n / LANES * LANES, count = 0;
  __mmask16 odd = 0; /* lanes where some a is not finite (a - a is NaN) */
  float *lanes_best = KEPT(float, m * LANES); /* each row's best lower ends, lane by lane */
  if (!lanes_best) return -RI_NO_MEMORY;
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
    if (floor_scalar(a, n, l1v, k, dxo, rest, tot, slack, i, n16, n, floor_ + i)) return -RI_NOT_FINITE;
  }
  if (odd) return -RI_NOT_FINITE;
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
    if (floor_scalar(a, n, l1v, k, dxo, rest, tot, slack, i, 0, n, floor_ + i)) return -RI_NOT_FINITE;
  }
  return mark_scalar(a, m, n, l1v, k, dxo, rest, tot, slack, floor_, 0, n, cols, 0);
#endif
}

/* Greedy choices of an exact 8-bit head (linear_q8's layout: wq [N' / 4, K / 32, 4, 32], ds [N' / 4, K / 32, 4, 1])
 * for rows x [m, K], from a[m, n], the same groups against x rounded to 8 bits (linear_q8a8), l1 [G, n] and tot [n]
 * (`greedy_candidates`): each row's scales dx (as quantize_q8 makes them), the `bounded` groups with the largest
 * scales over the rows bounded one by one, the candidates, then every candidate's exact logit from the kernel's own
 * block call on the block that holds it (the same sums as linear_q8 over the whole head, bit for bit) and each row's
 * first largest. out[i]: row i's token. Returns RI_OK; RI_NO_MEMORY; RI_NOT_FINITE: x or a not finite (the caller
 * takes the whole head). */
int certified_choices(const float *x, int64_t m, int64_t K, const float *a, int64_t n, const float *l1,
                      const float *tot, int64_t bounded, float slack, const uint8_t *wq, const float *ds, int64_t *out) {
  int64_t G = K / QG, k = bounded < G ? bounded : G;
  if (k > CAND_GROUPS) k = CAND_GROUPS;
  float *dx = KEPT(float, m * G), *colmax = KEPT(float, G), *dxo = KEPT(float, m * CAND_GROUPS), *rest = KEPT(float, m);
  float *best = KEPT(float, m), *buf = KEPT(float, MBQ * NB);
  int32_t *cols = KEPT(int32_t, n);
  if (!dx || !colmax || !dxo || !rest || !best || !buf || !cols) return RI_NO_MEMORY;
  for (int64_t g = 0; g < G; g++) colmax[g] = 0.0f;
  for (int64_t i = 0; i < m; i++)
    for (int64_t g = 0; g < G; g++) {
      float amax = 0.0f;
      for (int64_t j = 0; j < QG; j++) {
        float v = x[i * K + g * QG + j];
        if (!isfinite(v)) return RI_NOT_FINITE;
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
  if (count < 0) return (int)-count;
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
  return RI_OK;
}
