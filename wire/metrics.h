/*
 * metrics: Prometheus histograms and counters that a hot path can update
 * without a lock, and the text exposition format (version 0.0.4) they are
 * read in.
 *
 * An observation is three relaxed atomic additions (its bucket, its count's
 * bucket is implied, the sum in microseconds): no lock, no allocation, and
 * no ordering with anything else. A reader (the /metrics handler) reads the
 * buckets one by one while others may be adding, and makes the cumulative
 * counts and _count from what it read, so `le="+Inf"` always equals
 * `_count` in one exposition; `_sum` may lag by the observations that were
 * in flight.
 */
#ifndef CUBICLE_WIRE_METRICS_H
#define CUBICLE_WIRE_METRICS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define METRICS_MAX_BUCKETS 18

/* A histogram's upper bounds in seconds, ascending (+Inf is implied). */
struct metrics_buckets {
	int n;
	double le[METRICS_MAX_BUCKETS];
};

/* Request and action latencies: 0.5 ms to 60 s. */
extern const struct metrics_buckets metrics_latency;
/* Lifecycle operations (boot, stop, start): 50 ms to 10 min. */
extern const struct metrics_buckets metrics_lifecycle;

struct metrics_hist {
	const struct metrics_buckets *b;	     /* set before the first observation */
	_Atomic uint64_t n[METRICS_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
	_Atomic uint64_t sum_us;
};

/* Counts one observation of `us` microseconds (negative counts as 0). */
void metrics_observe(struct metrics_hist *h, int64_t us);

/* How many observations h holds. */
uint64_t metrics_count(const struct metrics_hist *h);

/* Adds v to a counter (relaxed). */
static inline void metrics_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t metrics_get(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* "# HELP name help\n# TYPE name type\n" (type: counter, gauge, histogram). */
void metrics_head(FILE *f, const char *name, const char *type, const char *help);

/* One histogram's _bucket, _sum and _count lines; labels is "" or
 * `a="x",b="y"` (already escaped: metrics_label). */
void metrics_write_hist(FILE *f, const char *name, const char *labels,
			const struct metrics_hist *h);

/* Copies s into out as a label value: backslash, quote and newline escaped,
 * cut to fit (len >= 1). */
void metrics_label(char *out, size_t len, const char *s);

#endif
