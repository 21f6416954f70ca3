/* The kernel's clock: where a pass's time goes inside the layer steps, for pass-cost's breakdown
 * (bench/pass_parts.py). Off unless kernel_clock(1, ...) turns it on; then the layer steps add the seconds of
 * their Linears, attention, stream-row adapters and whole layers to ri_clock[section][part], the section being
 * whether the layer carries stream rows (a multi-stream layer) or only main rows. Timing changes no number. */
#include <time.h>

#include "rowinv.h"

RI_HIDDEN int ri_clock_on = 0;
RI_HIDDEN double ri_clock[CLK_SECTIONS][CLK_PARTS];

RI_HIDDEN double ri_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* out [CLK_SECTIONS * CLK_PARTS] (or NULL): the seconds added up since the last call, which are then cleared;
 * on: whether the layer steps keep the clock from now on. */
void kernel_clock(int on, double *out) {
  if (out) memcpy(out, ri_clock, sizeof(ri_clock));
  memset(ri_clock, 0, sizeof(ri_clock));
  ri_clock_on = on;
}
