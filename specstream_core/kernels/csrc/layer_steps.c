/* A decoding step's layer in one call (layer_front up to its MLP's activation, layer_back after it), a whole layer
 * (layer_step) and runs of them (layer_stack, stream_stack): the same calls in the same order as the modules make
 * them on this kernel, so the same numbers. */
#include "rowinv.h"

/* One Linear of a layer as the layer-front call takes it: its kind (LIN_F32, LIN_BF16: weight [N, K]; LIN_F32B,
 * LIN_BF16B: the same weights blocked; LIN_Q4: `linear_q4`'s nibbles and scales; LIN_Q4A8: `linear_q4a8_ld`'s),
 * its N outputs written at y + m * ldy. The same calls, so the same sums, as the module's own forward makes
 * (linear_f32, linear_bf16, linear_f32b, linear_bf16b, linear_q4, linear_q4a8_ld). 0, or the call's failure. */
static __thread int clock_section = CLK_MAIN; /* the layer being run: main rows only, or with stream rows */
static int lin_call(int kind, const void *w, const float *dm, const float *x, int64_t M, int64_t K, int64_t N, float *y,
                    int64_t ldy, int threads) {
  if (kind == LIN_F32) linear_f32_ld(x, M, K, (const float *)w, N, y, ldy, threads);
  else if (kind == LIN_BF16) linear_bf16_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else if (kind == LIN_F32B) linear_f32b_ld(x, M, K, (const float *)w, N, y, ldy, threads);
  else if (kind == LIN_BF16B) linear_bf16b_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else if (kind == LIN_Q4A8) return linear_q4a8_ld(x, M, K, (const uint8_t *)w, dm, N, y, ldy, threads);
  else if (kind == LIN_BF16X) return linear_bf16x_ld(x, M, K, (const uint16_t *)w, N, y, ldy, threads);
  else linear_q(q4_blocks, QG / 2, 2, x, M, K, (const uint8_t *)w, dm, N, y, ldy, threads);
  return RI_OK;
}
static int lin(int kind, const void *w, const float *dm, const float *x, int64_t M, int64_t K, int64_t N, float *y,
               int64_t ldy, int threads) {
  CLOCK_START;
  int failed = lin_call(kind, w, dm, x, M, K, N, y, ldy, threads);
  CLOCK_ADD(clock_section, CLK_LINEARS);
  return failed;
}


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

/* ---- A decoding step's layer, up to its MLP's activation ------------------------------------------------
 * What a Llama-form decoder layer computes for one sequence's step (rows q) before the activation of its
 * MLP, as its modules compute it on this kernel: the same calls in the same order, so the same numbers.
 *   x = rmsnorm(h, w1); qkv = x Wqkv^T; q and k rotated, k and v stored in the cache (rope_store);
 *   a = attention over the cache (attend_f32: spec/keys say what each row sees); h2 = h + a Wo^T;
 *   gu = rmsnorm(h2, w2) Wgu^T.
 * Other families' forms (layer_args' last fields, kernels/steps/layer_forms.py): q and k normalized before RoPE
 * (qk_norm: Qwen3, OLMo 2), the two norms after the attention and after the MLP instead of before them (post_norms:
 * OLMo 2, h2 = h + rmsnorm(a Wo^T, w1), out = h2 + rmsnorm(down(...), w2)), RoPE over the first R dimensions of a
 * head (step_args' R: Phi-4-mini), q/k/v and gate/up one Linear each (Phi-3: n_qkv_parts, n_gu_parts of 1).
 * One call instead of ~25 Python-level operations. h [q, d] in; h2 [q, d], gu [q, n_gu] out. Returns RI_OK, or
 * the first failure (RI_NO_MEMORY, RI_BAD_SHAPE: a head over MAX_D ...). */
#define LORA_MAX_RANK 256
/* RG rows at once (1 to 4, compile-time): t[i][c0 .. c0 + 2 LANES) = x_i . At's columns, each summed over K in order,
 * At's vectors read once for the RG rows; then delta_i = t_i Bt, each output summed over the rank in order, Bt's
 * vectors read once for the RG rows. w0, w1: the two t vectors' widths (w1 = 0: one vector). A row's numbers do not
 * depend on RG. */
static inline __attribute__((always_inline)) void lora_group(const float *x, int64_t K, const uint16_t *At,
                                                             const uint16_t *Bt, int64_t r, int64_t N, int64_t ldn, float *t,
                                                             float *delta, const int RG) {
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
      UNROLLED for (int c = 0; c < 4; c++) w[c] = load_bf16(Bt + j * ldn + n0 + c * LANES, LANES);
      UNROLLED for (int i = 0; i < RG; i++) {
        vec tv = vset1(t[i * LORA_MAX_RANK + j]);
        UNROLLED for (int c = 0; c < 4; c++) acc[i][c] = vfmadd(tv, w[c], acc[i][c]);
      }
    }
    UNROLLED for (int i = 0; i < RG; i++) UNROLLED for (int c = 0; c < 4; c++) store_x(delta + i * ldn + n0 + c * LANES, acc[i][c], LANES);
  }
  for (; n0 < N; n0 += LANES) { /* the rest, a vector at a time */
    int w = N - n0 < LANES ? (int)(N - n0) : LANES;
    UNROLLED for (int i = 0; i < RG; i++) {
      vec acc = vzero();
      for (int64_t j = 0; j < r; j++) acc = vfmadd(vset1(t[i * LORA_MAX_RANK + j]), load_bf16(Bt + j * ldn + n0, w), acc);
      store_x(delta + i * ldn + n0, acc, w);
    }
  }
}
/* outputs n0 .. n0 + n of `lora_rows`: each group of up to 4 rows through `lora_group` */
static void lora_part(const float *x, int64_t m, int64_t K, const uint16_t *At, const uint16_t *Bt, int64_t r, int64_t N,
                      float *delta, int64_t n0, int64_t n) {
  float t[4 * LORA_MAX_RANK];
  for (int64_t i = 0; i < m; i += 4) {
    int rg = m - i < 4 ? (int)(m - i) : 4;
    const float *xi = x + i * K;
    float *di = delta + i * N + n0;
    if (rg == 4) lora_group(xi, K, At, Bt + n0, r, n, N, t, di, 4);
    else if (rg == 3) lora_group(xi, K, At, Bt + n0, r, n, N, t, di, 3);
    else if (rg == 2) lora_group(xi, K, At, Bt + n0, r, n, N, t, di, 2);
    else lora_group(xi, K, At, Bt + n0, r, n, N, t, di, 1);
  }
}
/* A row adapter's delta, delta [m, N] = (x [m, K] A^T) B^T, from At = A^T [K, r] and Bt = B^T [r, N] (bf16,
 * contiguous: half the read of fp32 factors, which bound this step: ~1.3 MB a layer at rank 32), in groups of up to 4
 * rows (`lora_group`: the outputs along the vector lanes, no horizontal sums, the factors read once a group; a rank-32
 * adapter is ~20 k FMAs a row), threads taking parts of the outputs (each output's sums the same). Stream rows only
 * draft, so this order is free to choose; StreamRowLoRA's forward calls the same function. RI_BAD_SHAPE for a rank
 * over LORA_MAX_RANK. */
int lora_rows(const float *x, int64_t m, int64_t K, const uint16_t *At, const uint16_t *Bt, int64_t r, int64_t N,
              float *delta, int threads) {
  if (r > LORA_MAX_RANK) return RI_BAD_SHAPE;
  /* threads take parts of the outputs (whole blocks of 4 vectors; each part makes t again, a tenth of the work) */
  int64_t parts = threads > 1 && N >= 8 * LANES * threads ? threads : 1;
  if (parts == 1) {
    lora_part(x, m, K, At, Bt, r, N, delta, 0, N);
    return RI_OK;
  }
  int64_t width = (N / parts + 4 * LANES - 1) / (4 * LANES) * (4 * LANES);
  _Pragma("omp parallel for schedule(static) num_threads(threads)")
  for (int64_t p = 0; p < parts; p++)
    if (p * width < N) lora_part(x, m, K, At, Bt, r, N, delta, p * width, N - p * width < width ? N - p * width : width);
  return RI_OK;
}
/* Stream rows n .. q - 1 of y (row stride ld, N columns) += (x A^T) B^T of the same rows of x [q, K]: a row
 * adapter as StreamRowLoRA computes it (`lora_rows`, then the add), At = A^T [K, r], Bt = B^T [r, N] in bf16. A rank with
 * LORA_TILES set: A [r, K] and B [N, r] as bf16 tiles (`amx_tiles.tiled`) and both products on AMX
 * (linear_bf16x), as StreamRowLoRA computes it on a layer whose Linears are on tiles. */
static int lora_add(const float *x, int64_t q, int64_t n, int64_t K, const float *A, const float *B, int64_t r,
                    float *y, int64_t ld, int64_t N, int threads) {
  int64_t m = q - n, tiles = r & LORA_TILES;
  if (m <= 0) return RI_OK;
  CLOCK_START;
  r &= LORA_TILES - 1;
  float *t = KEPT(float, m * r), *delta = KEPT(float, m * N);
  int failed = !t || !delta ? RI_NO_MEMORY : RI_OK;
  if (!failed && tiles) {
    failed = linear_bf16x_ld(x + n * K, m, K, (const uint16_t *)A, r, t, r, threads);
    if (!failed) failed = linear_bf16x_ld(t, m, r, (const uint16_t *)B, N, delta, N, threads);
  } else if (!failed)
    failed = lora_rows(x + n * K, m, K, (const uint16_t *)A, (const uint16_t *)B, r, N, delta, threads);
  if (!failed)
    for (int64_t i = 0; i < m; i++) {
      float *yi = y + (n + i) * ld;
      const float *di = delta + i * N;
      int64_t j = 0;
      for (; j + LANES <= N; j += LANES) store_x(yi + j, vadd(load_x(yi + j, LANES), load_x(di + j, LANES)), LANES);
      for (; j < N; j++) yi[j] += di[j];
    }
  CLOCK_ADD(clock_section, CLK_ADAPTERS);
  return failed;
}

/* stream rows a step needs for their attention to go on tiles: below, the vector code costs less (SmolLM2's heads over
 * 259 keys, one thread, ad-hoc: 4 rows 39.6 us against 43.2 on tiles, 6 rows 54.2 against 46.3, 8 rows 114.7 against
 * 76.6, 20 rows 149.4 against 80.6) */
#define TILE_STREAM_ROWS 8
int attend_tiles_rows(void) { return TILE_STREAM_ROWS; } /* rowinv_steps.TiledStreams decides by it too */

/* ---- q/k norms (Qwen3, OLMo 2) ------------------------------------------------------------------------------
 * RMSNorm of q's and k's columns of fused q/k/v rows (qkv [q, ld], q at column 0, k at H D) in place, before RoPE, as
 * the modules compute them on this kernel (`RowInvariantNorm`: rmsnorm_f32, each row alone): whole = 0, each head's D
 * values with q_w, k_w [D] (Qwen3's q_norm, k_norm over the head dimension); whole = 1, all H D (Hkv D) values of a row
 * with q_w [H D], k_w [Hkv D] (OLMo 2's, over the whole projection). k_w NULL: q only. */
void qk_norm(float *qkv, int64_t q, int64_t ld, int64_t H, int64_t Hkv, int64_t D, const float *q_w, const float *k_w,
             float eps, int64_t whole) {
  for (int64_t t = 0; t < q; t++) {
    float *row = qkv + t * ld;
    if (whole) {
      rmsnorm_f32(row, 1, H * D, q_w, eps, row);
      if (k_w) rmsnorm_f32(row + H * D, 1, Hkv * D, k_w, eps, row + H * D);
    } else {
      rmsnorm_f32(row, H, D, q_w, eps, row);
      if (k_w) rmsnorm_f32(row + H * D, Hkv, D, k_w, eps, row + H * D);
    }
  }
}

/* The layer's Linears (`layer`), in order: n_qkv_parts writing q's, k's and v's columns of qkv side by side (one fused
 * call, or q, k and v), o, then n_gu_parts writing gate's and up's columns of gu (one fused call, or gate and
 * up): kind[i], w[i], dm[i] (LIN_Q4's scales, else NULL), n[i] outputs. lora: NULL, or the A and B weights of
 * the q, k, v, o, gate and up row adapters (rank `rank`) that rows n_main.. of the step get. */
static int front(const layer_args *layer, const step_args *step, const draft_args *dr, const float *h, float *k_cache,
                 float *v_cache, float *h2, float *gu) {
  const int64_t q = step->q, d = step->d, H = step->H, Hkv = step->Hkv, D = step->D, cap = step->cap;
  const int64_t n_qkv_parts = layer->n_qkv_parts, n_gu_parts = layer->n_gu_parts, rank = layer->rank;
  const int *kind = layer->kind;
  const void *const *w = layer->w;
  const float *const *dm = layer->dm, *const *lora = layer->lora;
  const int64_t *n = layer->n, *spec = step->spec, *keys = step->keys;
  const float scaling = step->scaling;
  const int threads = (int)step->threads;
  int64_t n_qkv = (H + 2 * Hkv) * D, o_at = n_qkv_parts, n_gu = 0;
  for (int64_t i = 0; i < n_gu_parts; i++) n_gu += n[o_at + 1 + i];
  int64_t I = n_gu / 2;
  int64_t n_main = lora ? step->n_main : q; /* no row adapters: nothing to add, no stream rows to draft with */
  clock_section = n_main < q ? CLK_STREAM : CLK_MAIN;
  float *x = KEPT(float, q * d), *qkv = KEPT(float, q * n_qkv);
  float *qr = KEPT(float, q * H * D), *a = KEPT(float, q * H * D);
  float *o = KEPT(float, q * d);
  int failed = !x || !qkv || !qr || !a || !o ? RI_NO_MEMORY : RI_OK;
  const int post = layer->post_norms != 0; /* OLMo 2: the norms after attention and after the MLP, none before */
  const float *xa = post ? h : x;          /* what q/k/v (then gate/up) read */
  const int fl = layer->lora_fused != 0, at_o = fl ? 2 : 6; /* the adapters' layout; o's A in lora */
  if (!failed) {
    if (!post) rmsnorm_f32(h, q, d, layer->w1, layer->eps, x);
    for (int64_t i = 0, col = 0; i < n_qkv_parts && !failed; col += n[i], i++)
      failed = lin_rows(kind[i], w[i], dm[i], DRAFT_PART(dr, i), xa, q, n_main, d, n[i], qkv + col, n_qkv, threads);
    if (!failed && n_main < q && fl) /* one q/k/v adapter (lora: A, B of q/k/v, o, gate/up) */
      failed = lora_add(xa, q, n_main, d, lora[0], lora[1], rank, qkv, n_qkv, n_qkv, threads);
    else if (!failed && n_main < q) { /* q, k, v adapters (lora: A, B of q, k, v, o, gate, up) */
      failed = lora_add(xa, q, n_main, d, lora[0], lora[1], rank, qkv, n_qkv, H * D, threads);
      if (!failed) failed = lora_add(xa, q, n_main, d, lora[2], lora[3], rank, qkv + H * D, n_qkv, Hkv * D, threads);
      if (!failed)
        failed = lora_add(xa, q, n_main, d, lora[4], lora[5], rank, qkv + (H + Hkv) * D, n_qkv, Hkv * D, threads);
    }
  }
  if (!failed && layer->q_norm) qk_norm(qkv, q, n_qkv, H, Hkv, D, layer->q_norm, layer->k_norm, layer->qk_eps,
                                        layer->qk_whole);
  if (!failed) {
    rope_store_r(qkv, 1, q, H, Hkv, D, step->R ? step->R : D, step->cos, step->sin, qr, k_cache, v_cache, cap,
                 step->start);
    /* stream rows on tiles where the layer's Linears are, 8 or more of them (attend_tiles; rowinv_steps.TiledStreams,
     * the modules' path, decides alike) */
    int64_t first = q - n_main >= TILE_STREAM_ROWS && kind[0] == LIN_BF16X ? n_main : q;
    CLOCK_START;
    failed = attend_f32(qr, H * D, D, k_cache, D, cap * D, v_cache, D, cap * D, first, H, Hkv, D, spec, keys, scaling, a,
                        threads);
    if (!failed && first < q) {
      failed = attend_tiles(qr + first * H * D, H * D, D, k_cache, v_cache, cap * D, q - first, H, Hkv, D, spec + 2 * first,
                            keys, scaling, a + first * H * D, threads);
      if (failed == RI_BAD_SHAPE || failed == RI_NO_FEATURE) /* not on tiles: the vector code */
        failed = attend_f32(qr + first * H * D, H * D, D, k_cache, D, cap * D, v_cache, D, cap * D, q - first, H, Hkv, D,
                            spec + 2 * first, keys, scaling, a + first * H * D, threads);
    }
    CLOCK_ADD(clock_section, CLK_ATTENTION);
  }
  if (!failed) {
    failed = lin_rows(kind[o_at], w[o_at], dm[o_at], DRAFT_PART(dr, o_at), a, q, n_main, H * D, d, o, d, threads);
    if (!failed && n_main < q) failed = lora_add(a, q, n_main, H * D, lora[at_o], lora[at_o + 1], rank, o, d, d, threads);
  }
  if (!failed) {
    if (post) rmsnorm_f32(o, q, d, layer->w1, layer->eps, o); /* h + norm(attention's output) */
    for (int64_t i = 0; i < q * d; i++) h2[i] = h[i] + o[i];
    if (!post) rmsnorm_f32(h2, q, d, layer->w2, layer->eps, x);
    xa = post ? h2 : x;
    for (int64_t i = 0, col = 0; i < n_gu_parts && !failed; col += n[o_at + 1 + i], i++)
      failed = lin_rows(kind[o_at + 1 + i], w[o_at + 1 + i], dm[o_at + 1 + i], DRAFT_PART(dr, o_at + 1 + i), xa, q,
                        n_main, d, n[o_at + 1 + i], gu + col, n_gu, threads);
    if (!failed && n_main < q && fl) failed = lora_add(xa, q, n_main, d, lora[4], lora[5], rank, gu, n_gu, n_gu, threads);
    else if (!failed && n_main < q) {
      failed = lora_add(xa, q, n_main, d, lora[8], lora[9], rank, gu, n_gu, I, threads);
      if (!failed) failed = lora_add(xa, q, n_main, d, lora[10], lora[11], rank, gu + I, n_gu, I, threads);
    }
  }
  return failed;
}
/* The step's layer up to its MLP's activation (above): layer's Linears, norms and row adapters (its down projection
 * and draft Linears are not read), h [q, d] in; h2 [q, d], gu [q, n_gu] out */
int layer_front(const layer_args *layer, const step_args *step, const float *h, float *k_cache, float *v_cache,
                float *h2, float *gu) {
  return front(layer, step, NULL, h, k_cache, v_cache, h2, gu);
}

/* ---- A decoding step's layer after its MLP's activation ---------------------------------------------------
 * out = h2 + down(a * up) for rows q, as the modules compute it after layer_front: the activation's output a
 * [q, I] times the up projection's columns (up, row stride ld_up) element by element, the down projection
 * (lin: kind, w, dm, d outputs), its stream-row adapter's delta added to rows n_main.. (lora_A [r, I], lora_B
 * [d, r], or NULL: StreamRowLoRA's adds), then the residual. Each product and sum is the one the torch ops
 * make, so the same numbers; one call instead of ~5 Python-level operations. Returns RI_OK, or the failure of a call
 * (RI_NO_MEMORY ...). */
static int back(const float *h2, const float *a, const float *up, int64_t ld_up, int64_t q, int64_t I, int64_t d,
                int kind, const void *w, const float *dm, const float *lora_A, const float *lora_B, int64_t rank,
                int64_t n_main, const draft_args *dr, const float *post_w, float eps, float *out, int threads) {
  float *m = KEPT(float, q * I), *y = KEPT(float, q * d);
  int failed = !m || !y ? RI_NO_MEMORY : RI_OK;
  clock_section = lora_A && n_main < q ? CLK_STREAM : CLK_MAIN;
  if (!failed) {
    for (int64_t i = 0; i < q; i++)
      for (int64_t j = 0; j < I; j++) m[i * I + j] = a[i * I + j] * up[i * ld_up + j];
    failed = dr ? lin_rows(kind, w, dm, (int)dr->down_kind, dr->down_w, dr->down_dm, dr->min_rows, m, q, n_main, I, d,
                           y, d, threads)
                : lin(kind, w, dm, m, q, I, d, y, d, threads);
    if (!failed && lora_A && n_main < q) failed = lora_add(m, q, n_main, I, lora_A, lora_B, rank, y, d, d, threads);
    if (!failed && post_w) rmsnorm_f32(y, q, d, post_w, eps, y); /* OLMo 2: h2 + norm(the MLP's output) */
    if (!failed)
      for (int64_t i = 0; i < q * d; i++) out[i] = h2[i] + y[i];
  }
  return failed;
}
int layer_back(const float *h2, const float *a, const float *up, int64_t ld_up, int64_t q, int64_t I, int64_t d,
               int kind, const void *w, const float *dm, const float *lora_A, const float *lora_B, int64_t rank,
               int64_t n_main, float *out, int threads) {
  return back(h2, a, up, ld_up, q, I, d, kind, w, dm, lora_A, lora_B, rank, n_main, NULL, NULL, 0.0f, out, threads);
}

/* ---- A whole layer's step, and runs of layers -------------------------------------------------------------
 * One sequence's decoding step through a whole Llama-form layer: the front (above), SiLU on gate's columns of its
 * gate/up output (silu_rows, through the step's expv), then the back with the down projection (down_kind, down_w,
 * down_dm; its stream-row adapter down_A, down_B of the front's rank and rows, or NULL) and, where the layer has row
 * adapters, its draft Linears for the stream rows. out [q, d]: the layer's output. */
static int layer_step(const layer_args *layer, const step_args *step, const float *h, float *k_cache, float *v_cache,
                      float *out) {
  const int64_t q = step->q, d = step->d, n_gu_parts = layer->n_gu_parts, o_at = layer->n_qkv_parts;
  const float *const *lora = layer->lora;
  const draft_args *dr = layer->draft;
  int64_t n_gu = 0;
  for (int64_t i = 0; i < n_gu_parts; i++) n_gu += layer->n[o_at + 1 + i];
  int64_t I = n_gu / 2;
  float *h2 = KEPT(float, q * d), *gu = KEPT(float, q * n_gu);
  float *act = KEPT(float, q * I);
  int failed = !h2 || !gu || !act ? RI_NO_MEMORY : RI_OK;
  CLOCK_START;
  if (!failed) failed = front(layer, step, lora ? dr : NULL, h, k_cache, v_cache, h2, gu);
  if (!failed) {
    silu_rows(gu, n_gu, q, I, act, step->expv);
    failed = back(h2, act, gu + I, n_gu, q, I, d, (int)layer->down_kind, layer->down_w, layer->down_dm,
                  lora ? layer->down_A : NULL, layer->down_B, layer->rank, lora ? step->n_main : q, lora ? dr : NULL,
                  layer->post_norms ? layer->w2 : NULL, layer->eps, out, (int)step->threads);
  }
  CLOCK_ADD(clock_section, CLK_LAYERS);
  clock_section = CLK_MAIN;
  return failed;
}

/* ---- Consecutive layers in one call ------------------------------------------------------------------------
 * A run of layers (`layer_run`: each layer's layer_args, as `rowinv_steps.StackLayer` lays them out,
 * and the step's step_args) in one call: layer_stack runs layer_step on each in turn, the output of
 * one the input of the next, with the step's RoPE tables, cache slots, keys and stream rows shared. */
int layer_stack(const layer_run *run, const float *h, float *out) {
  const int64_t L = run->count, q = run->step.q, d = run->step.d;
  float *buf = KEPT(float, q * d);
  int failed = !buf ? RI_NO_MEMORY : RI_OK;
  const float *x = h;
  for (int64_t l = 0; l < L && !failed; l++) {
    float *y = (L - 1 - l) % 2 ? buf : out; /* the last layer writes out; each writes where its input is not */
    failed = layer_step(run->layers[l], &run->step, x, run->k_caches[l], run->v_caches[l], y);
    x = y;
  }
  return failed;
}

/* A speculative step's layers in one call, where msa.forward would make two layer_stack calls with Python between
 * them: the L1 lower layers on the n main rows (their output into mid: the rows the streams are born from), the
 * stream rows born as msa's _with_stream_rows makes them (row n + c gamma + j = mid[carriers[c]] + emb[j], one fp32
 * add each), then the L2 multi-stream layers on all q = n + s gamma rows (out [q, d]). Each run (lower, upper) has its
 * own step: its rows (n; q), RoPE tables ([n, D]; [q, D]), attention keys (spec, keys) and first stream row; both write
 * the cache at the same `start`. norm: NULL, or the model's final RMSNorm weight (eps), applied to out in place as
 * rmsnorm_f32 applies it. The same calls as two layer_stack calls and the norm's, so the same numbers. */
int stream_stack(const layer_run *lower, const layer_run *upper, const float *h, const int64_t *carriers, int64_t s,
                 int64_t gamma, const float *emb, const float *norm, float eps, float *mid, float *out) {
  const int64_t n = lower->step.q, d = lower->step.d, q = n + s * gamma;
  if (upper->step.q != q) return RI_BAD_SHAPE;
  float *x = KEPT(float, q * d);
  if (!x) return RI_NO_MEMORY;
  int failed = layer_stack(lower, h, mid);
  if (failed) return failed;
  memcpy(x, mid, (size_t)(n * d) * sizeof(float));
  for (int64_t c = 0; c < s; c++)
    for (int64_t j = 0; j < gamma; j++) {
      const float *m = mid + carriers[c] * d, *e = emb + j * d;
      float *r = x + (n + c * gamma + j) * d;
      for (int64_t i = 0; i < d; i++) r[i] = m[i] + e[i];
    }
  failed = layer_stack(upper, x, out);
  if (failed) return failed;
  if (norm) rmsnorm_f32(out, q, d, norm, eps, out); /* the model's final norm, row by row in place */
  return RI_OK;
}
