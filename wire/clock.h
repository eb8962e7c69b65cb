/*
 * clock: the one monotonic clock and sleep every cubicle binary uses.
 *
 * Deadlines, timeouts and durations are measured with clock_now_ms() (never
 * the wall clock, which jumps); wall time for the ledger and for answers
 * comes from clock_wall_ms(). Sleeps restart after a signal, so a sleep of
 * N ms lasts at least N ms.
 */
#ifndef CUBICLE_WIRE_CLOCK_H
#define CUBICLE_WIRE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC: for deadlines and durations. */
int64_t clock_now_ms(void);
/* Microseconds of CLOCK_MONOTONIC: for figures finer than a millisecond. */
int64_t clock_now_us(void);
/* Milliseconds since the epoch (CLOCK_REALTIME): for timestamps people read. */
int64_t clock_wall_ms(void);
/* The absolute time ms milliseconds from now on clock `id`, for
 * pthread_cond_timedwait (CLOCK_REALTIME unless the condition variable was
 * made with another clock). */
struct timespec clock_deadline(clockid_t id, int64_t ms);
/* Sleeps at least ms milliseconds (nothing for ms <= 0). */
void clock_sleep_ms(int64_t ms);

#endif
