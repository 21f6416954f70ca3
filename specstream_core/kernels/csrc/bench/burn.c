/* The arithmetic roofs of this core, for the benchmarks only (bench/roofline.py builds this file on its own, with the
 * kernel's flags; the shipped library does not hold it): chains of vector FMAs, and of 8-bit dot products. */
#include "../rowinv.h"

/* ---- The fp32 roof ------------------------------------------------------------------------------------
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

#if defined(__AVX512VNNI__)
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
int burn_a8(void) { return 1; }
#else
int dot8_burn(int64_t n) { return (int)n * 0; }
int burn_a8(void) { return 0; }
#endif
int burn_lanes(void) { return LANES; }
