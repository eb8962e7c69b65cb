/*
 * procview-text: the text of a container's size files (envd/guest/
 * procview-text.h), from the cgroup's memory files in both formats (this
 * machine runs cgroup v1; v2's memory.stat is checked from a sample) and
 * from samples of the host's /proc/stat and /proc/cpuinfo (cmocka).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "procview-text.h"

/* The value of "Key:" in meminfo text, in kB; -1 when missing. */
static long long meminfo_kb(const char *text, const char *key)
{
	char k[64];
	snprintf(k, sizeof k, "\n%s:", key);
	char buf[8192];
	snprintf(buf, sizeof buf, "\n%s", text);
	const char *p = strstr(buf, k);
	return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

static const char v1_stat[] = "cache 4096\nrss 8192\n"
			      "total_cache 104857600\n"
			      "total_rss 52428800\n"
			      "total_shmem 4194304\n"
			      "total_mapped_file 1048576\n"
			      "total_dirty 8192\n"
			      "total_writeback 0\n"
			      "total_active_anon 41943040\n"
			      "total_inactive_anon 10485760\n"
			      "total_active_file 62914560\n"
			      "total_inactive_file 41943040\n"
			      "total_unevictable 0\n"
			      "hierarchical_memory_limit 536870912\n";

static const char v2_stat[] = "anon 52428800\n"
			      "file 104857600\n"
			      "kernel_stack 65536\n"
			      "shmem 4194304\n"
			      "file_mapped 1048576\n"
			      "file_dirty 8192\n"
			      "file_writeback 0\n"
			      "active_anon 41943040\n"
			      "inactive_anon 10485760\n"
			      "active_file 62914560\n"
			      "inactive_file 41943040\n"
			      "unevictable 0\n"
			      "slab_reclaimable 2097152\n"
			      "slab_unreclaimable 1048576\n";

static void check_meminfo(int version, const char *stat, uint64_t reclaim_extra)
{
	struct procview_mem m = {.limit = 512ull << 20, .usage = 200ull << 20};
	procview_memstat_parse(version, stat, &m);
	assert_int_equal(m.file, 100ull << 20);
	assert_int_equal(m.anon, 50ull << 20);
	assert_int_equal(m.shmem, 4ull << 20);
	char out[4096];
	int n = procview_meminfo(&m, out, sizeof out);
	assert_true(n > 0);
	assert_int_equal(meminfo_kb(out, "MemTotal"), 512 * 1024);
	assert_int_equal(meminfo_kb(out, "MemFree"), (512 - 200) * 1024);
	/* Available: free plus the cache that is not shmem, plus reclaimable slab. */
	assert_int_equal(meminfo_kb(out, "MemAvailable"),
			 (long long)(((512 - 200) + (100 - 4)) * 1024 + reclaim_extra / 1024));
	assert_int_equal(meminfo_kb(out, "Cached"), 100 * 1024);
	assert_int_equal(meminfo_kb(out, "SwapTotal"), 0);
	assert_int_equal(meminfo_kb(out, "Shmem"), 4 * 1024);
	assert_int_equal(meminfo_kb(out, "Active"), (40 + 60) * 1024);
	assert_int_equal(meminfo_kb(out, "Buffers"), 0);
	/* The kernel's layout: "MemTotal:" padded, values right-aligned, kB. */
	assert_true(strncmp(out, "MemTotal:         524288 kB\n", 28) == 0);
}

static void test_meminfo_v1(void **state)
{
	(void)state;
	check_meminfo(1, v1_stat, 0);
}

static void test_meminfo_v2(void **state)
{
	(void)state;
	check_meminfo(2, v2_stat, 2ull << 20);
}

static void test_meminfo_over_limit(void **state)
{
	(void)state;
	/* Usage past the limit (kernel memory on v1) is not negative free memory. */
	struct procview_mem m = {
	    .limit = 256ull << 20, .usage = 300ull << 20, .file = 400ull << 20};
	char out[4096];
	assert_true(procview_meminfo(&m, out, sizeof out) > 0);
	assert_int_equal(meminfo_kb(out, "MemFree"), 0);
	assert_int_equal(meminfo_kb(out, "MemAvailable"), 256 * 1024);
	/* Too small a buffer says so. */
	char tiny[16];
	assert_int_equal(procview_meminfo(&m, tiny, sizeof tiny), -1);
}

static const char host_stat[] = "cpu  1000 10 500 90000 20 0 5 0 0 0\n"
				"cpu0 100 1 50 40000 10 0 2 0 0 0\n"
				"cpu1 200 2 100 20000 5 0 1 0 0 0\n"
				"cpu2 300 3 150 15000 3 0 1 0 0 0\n"
				"cpu3 400 4 200 15000 2 0 1 0 0 0\n"
				"intr 12345 0 0\n"
				"ctxt 999\n"
				"btime 1700000000\n"
				"processes 4242\n"
				"procs_running 2\n"
				"procs_blocked 0\n"
				"softirq 1 2 3\n";

static void test_stat(void **state)
{
	(void)state;
	int cpus[] = {1, 3};
	char out[2048];
	assert_true(procview_stat(host_stat, cpus, 2, out, sizeof out) > 0);
	assert_non_null(strstr(out, "cpu  600 6 300 35000 7 0 2 0 0 0\n"));
	assert_non_null(strstr(out, "\ncpu0 200 2 100 20000 5 0 1 0 0 0\n"));
	assert_non_null(strstr(out, "\ncpu1 400 4 200 15000 2 0 1 0 0 0\n"));
	assert_null(strstr(out, "cpu2"));
	assert_null(strstr(out, "cpu3"));
	assert_non_null(strstr(out, "\nbtime 1700000000\n"));
	assert_non_null(strstr(out, "\nprocesses 4242\n"));
	/* Not a /proc/stat. */
	assert_int_equal(procview_stat("hello\n", cpus, 2, out, sizeof out), -1);
}

static const char host_cpuinfo[] = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: A\n\n"
				   "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: B\n\n"
				   "processor\t: 2\nvendor_id\t: GenuineIntel\nmodel name\t: C\n\n";

static void test_cpuinfo(void **state)
{
	(void)state;
	int cpus[] = {2};
	char out[1024];
	assert_true(procview_cpuinfo(host_cpuinfo, cpus, 1, out, sizeof out) > 0);
	assert_string_equal(out, "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: C\n\n");
	int two[] = {0, 1};
	assert_true(procview_cpuinfo(host_cpuinfo, two, 2, out, sizeof out) > 0);
	assert_non_null(strstr(out, "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: B"));
	assert_null(strstr(out, "model name\t: C"));
}

static void test_online(void **state)
{
	(void)state;
	char out[32];
	assert_int_equal(procview_online(1, out, sizeof out), 2);
	assert_string_equal(out, "0\n");
	assert_true(procview_online(4, out, sizeof out) > 0);
	assert_string_equal(out, "0-3\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_meminfo_v1),
	    cmocka_unit_test(test_meminfo_v2),
	    cmocka_unit_test(test_meminfo_over_limit),
	    cmocka_unit_test(test_stat),
	    cmocka_unit_test(test_cpuinfo),
	    cmocka_unit_test(test_online),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
