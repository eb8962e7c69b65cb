/*
 * procview-text: the text of the size files (see procview-text.h).
 */
#include "procview-text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An output buffer that remembers when something did not fit. */
struct procview_out {
	char *buf;
	size_t cap, len;
	bool full;
};

static void procview_put(struct procview_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void procview_put(struct procview_out *o, const char *fmt, ...)
{
	if (o->full)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len) {
		o->full = true;
		o->buf[o->len] = '\0';
		return;
	}
	o->len += (size_t)n;
}

static void procview_putn(struct procview_out *o, const char *s, size_t n)
{
	if (o->full)
		return;
	if (n >= o->cap - o->len) {
		o->full = true;
		return;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static int procview_done(struct procview_out *o)
{
	return o->full ? -1 : (int)o->len;
}

static struct procview_out procview_out_init(char *out, size_t cap)
{
	struct procview_out o = {out, cap, 0, cap == 0};
	if (cap)
		out[0] = '\0';
	return o;
}

/* ---- memory ---------------------------------------------------------------------- */

void procview_memstat_parse(int cgroup_version, const char *text, struct procview_mem *m)
{
	/* v1's hierarchical totals (the computer's group and anything below),
	 * v2's own keys. */
	static const char *const v1[] = {"total_cache",
					 "total_rss",
					 "total_shmem",
					 "total_mapped_file",
					 "total_dirty",
					 "total_writeback",
					 "total_active_anon",
					 "total_inactive_anon",
					 "total_active_file",
					 "total_inactive_file",
					 "total_unevictable",
					 NULL,
					 NULL};
	static const char *const v2[] = {"file",
					 "anon",
					 "shmem",
					 "file_mapped",
					 "file_dirty",
					 "file_writeback",
					 "active_anon",
					 "inactive_anon",
					 "active_file",
					 "inactive_file",
					 "unevictable",
					 "slab_reclaimable",
					 "slab_unreclaimable"};
	uint64_t *fields[] = {&m->file,
			      &m->anon,
			      &m->shmem,
			      &m->mapped,
			      &m->dirty,
			      &m->writeback,
			      &m->active_anon,
			      &m->inactive_anon,
			      &m->active_file,
			      &m->inactive_file,
			      &m->unevictable,
			      &m->slab_reclaimable,
			      &m->slab_unreclaimable};
	const char *const *keys = cgroup_version == 2 ? v2 : v1;
	const size_t nkeys = sizeof fields / sizeof fields[0];
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *sp = memchr(line, ' ', len);
		if (sp) {
			size_t klen = (size_t)(sp - line);
			for (size_t i = 0; i < nkeys; i++)
				if (keys[i] && strlen(keys[i]) == klen &&
				    memcmp(keys[i], line, klen) == 0)
					*fields[i] = strtoull(sp + 1, NULL, 10);
		}
		line = end ? end + 1 : NULL;
	}
}

int procview_meminfo(const struct procview_mem *m, char *out, size_t cap)
{
	struct procview_out o = procview_out_init(out, cap);
	uint64_t total = m->limit;
	uint64_t used = m->usage < total ? m->usage : total;
	uint64_t free_b = total - used;
	uint64_t reclaim = (m->file > m->shmem ? m->file - m->shmem : 0) + m->slab_reclaimable;
	uint64_t avail = free_b + reclaim < total ? free_b + reclaim : total;
	struct {
		const char *key;
		uint64_t bytes;
	} rows[] = {
	    {"MemTotal", total},
	    {"MemFree", free_b},
	    {"MemAvailable", avail},
	    {"Buffers", 0},
	    {"Cached", m->file},
	    {"SwapCached", 0},
	    {"Active", m->active_anon + m->active_file},
	    {"Inactive", m->inactive_anon + m->inactive_file},
	    {"Active(anon)", m->active_anon},
	    {"Inactive(anon)", m->inactive_anon},
	    {"Active(file)", m->active_file},
	    {"Inactive(file)", m->inactive_file},
	    {"Unevictable", m->unevictable},
	    {"Mlocked", 0},
	    {"SwapTotal", 0},
	    {"SwapFree", 0},
	    {"Dirty", m->dirty},
	    {"Writeback", m->writeback},
	    {"AnonPages", m->anon},
	    {"Mapped", m->mapped},
	    {"Shmem", m->shmem},
	    {"KReclaimable", m->slab_reclaimable},
	    {"Slab", m->slab_reclaimable + m->slab_unreclaimable},
	    {"SReclaimable", m->slab_reclaimable},
	    {"SUnreclaim", m->slab_unreclaimable},
	    {"CommitLimit", total},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char key[32];
		snprintf(key, sizeof key, "%s:", rows[i].key);
		procview_put(&o, "%-15s %8llu kB\n", key,
			     (unsigned long long)(rows[i].bytes / 1024));
	}
	procview_put(&o, "HugePages_Total:       0\nHugePages_Free:        0\n"
			 "HugePages_Rsvd:        0\nHugePages_Surp:        0\n"
			 "Hugepagesize:       2048 kB\nHugetlb:               0 kB\n");
	return procview_done(&o);
}

/* ---- CPUs -------------------------------------------------------------------------- */

/* The index of host CPU `cpu` among cpus[0..n), or -1. */
static int procview_cpu_index(const int *cpus, int n, long cpu)
{
	for (int i = 0; i < n; i++)
		if (cpus[i] == cpu)
			return i;
	return -1;
}

#define PROCVIEW_STAT_FIELDS 10

int procview_stat(const char *host_stat, const int *cpus, int n, char *out, size_t cap)
{
	struct procview_out o = procview_out_init(out, cap);
	unsigned long long sum[PROCVIEW_STAT_FIELDS] = {0};
	int nfields = 0;
	/* First pass: the sum of the chosen CPUs' times. */
	for (const char *line = host_stat; line && *line;) {
		const char *end = strchr(line, '\n');
		if (strncmp(line, "cpu", 3) == 0 && line[3] >= '0' && line[3] <= '9') {
			char *p;
			long cpu = strtol(line + 3, &p, 10);
			if (procview_cpu_index(cpus, n, cpu) >= 0) {
				int k = 0;
				while (k < PROCVIEW_STAT_FIELDS && (!end || p < end) && *p == ' ') {
					sum[k++] += strtoull(p, &p, 10);
				}
				if (k > nfields)
					nfields = k;
			}
		}
		line = end ? end + 1 : NULL;
	}
	bool summed = false;
	for (const char *line = host_stat; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (strncmp(line, "cpu ", 4) == 0) {
			procview_put(&o, "cpu ");
			for (int k = 0; k < nfields; k++)
				procview_put(&o, " %llu", sum[k]);
			procview_put(&o, "\n");
			summed = true;
		} else if (strncmp(line, "cpu", 3) == 0 && line[3] >= '0' && line[3] <= '9') {
			char *p;
			long cpu = strtol(line + 3, &p, 10);
			int idx = procview_cpu_index(cpus, n, cpu);
			if (idx >= 0) {
				procview_put(&o, "cpu%d", idx);
				procview_putn(&o, p, len - (size_t)(p - line));
				procview_put(&o, "\n");
			}
		} else {
			procview_putn(&o, line, len);
			procview_put(&o, "\n");
		}
		line = end ? end + 1 : NULL;
	}
	if (!summed && !o.full)
		return -1; /* not a /proc/stat */
	return procview_done(&o);
}

int procview_cpuinfo(const char *host_cpuinfo, const int *cpus, int n, char *out, size_t cap)
{
	struct procview_out o = procview_out_init(out, cap);
	bool keep = false;
	for (const char *line = host_cpuinfo; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (strncmp(line, "processor", 9) == 0) {
			const char *colon = memchr(line, ':', len);
			long cpu = colon ? strtol(colon + 1, NULL, 10) : -1;
			int idx = procview_cpu_index(cpus, n, cpu);
			keep = idx >= 0;
			if (keep)
				procview_put(&o, "%.*s: %d\n", (int)(colon - line), line, idx);
		} else if (keep) {
			procview_putn(&o, line, len);
			procview_put(&o, "\n");
		}
		line = end ? end + 1 : NULL;
	}
	return procview_done(&o);
}

int procview_online(int n, char *out, size_t cap)
{
	struct procview_out o = procview_out_init(out, cap);
	if (n <= 1)
		procview_put(&o, "0\n");
	else
		procview_put(&o, "0-%d\n", n - 1);
	return procview_done(&o);
}
