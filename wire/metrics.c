#include "metrics.h"

#include <string.h>

const struct metrics_buckets metrics_latency = {
    16,
    {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
};

const struct metrics_buckets metrics_lifecycle = {
    14,
    {0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 600},
};

void metrics_observe(struct metrics_hist *h, int64_t us)
{
	if (us < 0)
		us = 0;
	const struct metrics_buckets *b = h->b ? h->b : &metrics_latency;
	double s = (double)us / 1e6;
	int i = 0;
	while (i < b->n && s > b->le[i])
		i++;
	atomic_fetch_add_explicit(&h->n[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
}

uint64_t metrics_count(const struct metrics_hist *h)
{
	const struct metrics_buckets *b = h->b ? h->b : &metrics_latency;
	uint64_t n = 0;
	for (int i = 0; i <= b->n; i++)
		n += atomic_load_explicit(&h->n[i], memory_order_relaxed);
	return n;
}

void metrics_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_write_hist(FILE *f, const char *name, const char *labels, const struct metrics_hist *h)
{
	const struct metrics_buckets *b = h->b ? h->b : &metrics_latency;
	const char *sep = labels[0] ? "," : "";
	uint64_t cum = 0;
	for (int i = 0; i < b->n; i++) {
		cum += atomic_load_explicit(&h->n[i], memory_order_relaxed);
		fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, b->le[i],
			(unsigned long long)cum);
	}
	cum += atomic_load_explicit(&h->n[b->n], memory_order_relaxed);
	fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
	uint64_t sum = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
	if (labels[0]) {
		fprintf(f, "%s_sum{%s} %.6f\n", name, labels, (double)sum / 1e6);
		fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
	} else {
		fprintf(f, "%s_sum %.6f\n", name, (double)sum / 1e6);
		fprintf(f, "%s_count %llu\n", name, (unsigned long long)cum);
	}
}

void metrics_label(char *out, size_t len, const char *s)
{
	size_t k = 0;
	for (; s && *s && k + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			out[k++] = '\\';
			out[k++] = *s;
		} else if (*s == '\n') {
			out[k++] = '\\';
			out[k++] = 'n';
		} else {
			out[k++] = *s;
		}
	}
	out[k] = 0;
}
