/* A layer's row-wise operations, each as its torch ops compute it, bit for bit: RMSNorm (rmsnorm_f32), RoPE and the
 * cache write (rope_store), SiLU (silu_rows). */
#include "rowinv.h"

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

/* ---- RoPE and the cache write -------------------------------------------------------------------------
 * A step's fused q/k/v rows [B, q, (H + 2 Hkv) D] (qkv, contiguous) out to where attention reads them:
 * q rotated into q_out [B, q, H, D]; k rotated and v as they are into the cache's slots start .. start + q
 * of each row (k_cache, v_cache: [B, Hkv, capacity, D] buffers, capacity `cap`). The rotation is
 * transformers' apply_rotary_pos_emb in fp32, (x * cos) + (rotate_half(x) * sin) with
 * rotate_half(x) = (-x2, x1) (over the first R dimensions of a head where RoPE is partial: Phi-3's
 * `q_rot`, the rest `q_pass` as it is; rope_store rotates all D): each product and the sum rounded on its own, so never contracted to an fma
 * (fp-contract off), and bit for bit what its torch ops compute. cos, sin: [B, q, D]. */
__attribute__((optimize("fp-contract=off")))
static void rotate(const float *x, const float *c, const float *s, int64_t D, int64_t R, float *out) {
  int64_t h = R / 2; /* the first R dimensions rotated (c, s: [R]), the rest as they are (partial rotary) */
  if (R < D) memcpy(out + R, x + R, (size_t)(D - R) * sizeof(float));
  for (int64_t i = 0; i < h; i++) {
    float a = x[i] * c[i], b = -x[i + h] * s[i];
    float e = x[i + h] * c[i + h], f = x[i] * s[i + h];
    out[i] = a + b;
    out[i + h] = e + f;
  }
}

void rope_store(const float *qkv, int64_t B, int64_t q, int64_t H, int64_t Hkv, int64_t D, const float *cos,
                const float *sin, float *q_out, float *k_cache, float *v_cache, int64_t cap, int64_t start) {
  rope_store_r(qkv, B, q, H, Hkv, D, D, cos, sin, q_out, k_cache, v_cache, cap, start);
}
void rope_store_r(const float *qkv, int64_t B, int64_t q, int64_t H, int64_t Hkv, int64_t D, int64_t R,
                  const float *cos, const float *sin, float *q_out, float *k_cache, float *v_cache, int64_t cap,
                  int64_t start) {
  int64_t width = (H + 2 * Hkv) * D;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < q; t++) {
      const float *row = qkv + (b * q + t) * width, *c = cos + (b * q + t) * R, *s = sin + (b * q + t) * R;
      for (int64_t j = 0; j < H; j++) rotate(row + j * D, c, s, D, R, q_out + ((b * q + t) * H + j) * D);
      for (int64_t j = 0; j < Hkv; j++) {
        int64_t slot = ((b * Hkv + j) * cap + start + t) * D;
        rotate(row + (H + j) * D, c, s, D, R, k_cache + slot);
        memcpy(v_cache + slot, row + (H + Hkv + j) * D, (size_t)D * sizeof(float));
      }
    }
}

/* ---- torch's SiLU ----------------------------------------------------------------------------------------
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
