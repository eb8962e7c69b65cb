/*
 * proc/shell (and proc/files, which shares its run_as identity) against real
 * bash: exit codes, output capture, deadlines that kill the whole process
 * group, truncation, stdin, environment, bad cwd, concurrency, run_as.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "files.h"
#include "shell.h"

#define NOBODY 65534

/* Runs `bash -c script` with the given options and asserts it started. */
static void run_bash(const char *script, int timeout_ms, struct shell_opts *o,
		     struct shell_result *r)
{
	const char *argv[] = {"bash", "-c", script, NULL};
	struct shell_opts def = {0};
	if (!o)
		o = &def;
	o->argv = argv;
	if (!o->timeout_ms)
		o->timeout_ms = timeout_ms;
	if (!o->as.uid && !o->as.gid && !o->as.home)
		o->as.uid = (uid_t)-1;
	struct err e = {0};
	int rc = shell_run(o, r, &e);
	if (rc != 0)
		fail_msg("shell_run(%s) failed: %s", script, e.message);
	o->argv = NULL;
}

/* True once `pid` no longer runs (gone, or a zombie waiting for its reaper). */
static int pid_dead(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static int wait_pid_dead(pid_t pid)
{
	for (int i = 0; i < 500; i++) {
		if (pid_dead(pid))
			return 1;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_exit_codes(void **state)
{
	struct shell_result r;
	run_bash("exit 3", 10000, NULL, &r);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.signal, 0);
	assert_false(r.timed_out);
	shell_result_free(&r);

	run_bash("true", 10000, NULL, &r);
	assert_int_equal(r.exit_code, 0);
	assert_true(r.duration_ms >= 0);
	shell_result_free(&r);

	run_bash("kill -TERM $$", 10000, NULL, &r);
	assert_int_equal(r.signal, SIGTERM);
	assert_int_equal(r.exit_code, 128 + SIGTERM);
	assert_false(r.timed_out);
	shell_result_free(&r);
}

/* envd ignores SIGPIPE and its worker threads may block signals: the child
 * must start with default dispositions and an empty mask. */
static void test_signals_reset(void **state)
{
	struct sigaction ign = {.sa_handler = SIG_IGN}, old;
	sigaction(SIGPIPE, &ign, &old);
	sigset_t block, oldmask;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &oldmask);
	struct shell_result r;
	run_bash("kill -PIPE $$; echo survived", 10000, NULL, &r);
	assert_int_equal(r.signal, SIGPIPE);
	assert_string_equal(r.out, "");
	shell_result_free(&r);
	run_bash("kill -TERM $$; echo survived", 10000, NULL, &r);
	assert_int_equal(r.signal, SIGTERM);
	shell_result_free(&r);
	pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
	sigaction(SIGPIPE, &old, NULL);
}

static void test_stdout_stderr(void **state)
{
	struct shell_result r;
	run_bash("echo out; echo err >&2; printf 'a\\0b'", 10000, NULL, &r);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.out_len, 7);
	assert_memory_equal(r.out, "out\na\0b", 7);
	assert_string_equal(r.err, "err\n");
	assert_false(r.out_truncated);
	assert_false(r.err_truncated);
	shell_result_free(&r);
}

static void test_timeout_kills_group(void **state)
{
	struct shell_result r;
	/* A background child that holds stdout, then a foreground sleep. */
	run_bash("sleep 100 & echo bg=$!; echo started; sleep 100", 700, NULL, &r);
	assert_true(r.timed_out);
	assert_int_equal(r.exit_code, -1);
	assert_non_null(strstr(r.out, "started\n"));
	char *bg = strstr(r.out, "bg=");
	assert_non_null(bg);
	pid_t pid = (pid_t)atoi(bg + 3);
	assert_true(pid > 0);
	assert_true(wait_pid_dead(pid));
	shell_result_free(&r);
}

static void test_daemon_holding_pipe_does_not_hang(void **state)
{
	struct shell_result r;
	/* setsid leaves the group: we must not wait for it to close stdout. */
	run_bash("setsid sleep 60 & echo daemon=$!; echo done", 30000, NULL, &r);
	assert_false(r.timed_out);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "done\n"));
	char *d = strstr(r.out, "daemon=");
	assert_non_null(d);
	pid_t pid = (pid_t)atoi(d + 7);
	assert_true(pid > 0);
	kill(pid, SIGKILL);
	shell_result_free(&r);
}

static void test_truncation(void **state)
{
	struct shell_result r;
	struct shell_opts o = {.max_output = 1000, .as.uid = (uid_t)-1};
	run_bash("head -c 3000000 /dev/zero | tr '\\0' x; head -c 5000 /dev/zero >&2; exit 4",
		 30000, &o, &r);
	assert_false(r.timed_out);
	assert_int_equal(r.exit_code, 4); /* drained to the end, so the child finished */
	assert_int_equal(r.out_len, 1000);
	assert_true(r.out_truncated);
	assert_int_equal(r.err_len, 1000);
	assert_true(r.err_truncated);
	assert_int_equal(r.out[999], 'x');
	assert_int_equal(r.out[1000], '\0');
	shell_result_free(&r);
}

static void test_stdin(void **state)
{
	size_t n = 3 << 20; /* more than any pipe buffer, both ways */
	char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)(i * 7 + 1);
	struct shell_opts o = {.stdin_data = data, .stdin_len = n, .as.uid = (uid_t)-1};
	struct shell_result r;
	run_bash("cat", 30000, &o, &r);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.out_len, n);
	assert_memory_equal(r.out, data, n);
	shell_result_free(&r);

	/* A child that ignores its stdin must not kill us with SIGPIPE. */
	struct shell_opts o2 = {.stdin_data = data, .stdin_len = n, .as.uid = (uid_t)-1};
	run_bash("echo ignored", 30000, &o2, &r);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "ignored\n");
	shell_result_free(&r);
	free(data);
}

static void test_env_and_cwd(void **state)
{
	const char *env[] = {"CUBICLE_A=hello world", "CUBICLE_B=x=y", "CUBICLE_A=second", NULL};
	struct shell_opts o = {.env = env, .cwd = "/usr", .as.uid = (uid_t)-1};
	struct shell_result r;
	run_bash("echo \"$CUBICLE_A|$CUBICLE_B|$PWD\"; env | grep -c ^CUBICLE_A=", 10000, &o, &r);
	assert_string_equal(r.out, "second|x=y|/usr\n1\n");
	shell_result_free(&r);

	const char *bad[] = {"NOEQUALS", NULL};
	const char *argv[] = {"true", NULL};
	struct shell_opts ob = {.argv = argv, .env = bad, .timeout_ms = 1000, .as.uid = (uid_t)-1};
	struct err e = {0};
	assert_int_equal(shell_run(&ob, &r, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "env");
}

static void test_bad_cwd_and_program(void **state)
{
	const char *argv[] = {"true", NULL};
	struct shell_opts o = {
	    .argv = argv, .cwd = "/nonexistent/dir", .timeout_ms = 1000, .as.uid = (uid_t)-1};
	struct shell_result r;
	struct err e = {0};
	assert_int_equal(shell_run(&o, &r, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "cwd");
	assert_non_null(strstr(e.message, "/nonexistent/dir"));

	const char *missing[] = {"cubicle-no-such-program", NULL};
	struct shell_opts om = {.argv = missing, .timeout_ms = 1000, .as.uid = (uid_t)-1};
	err_clear(&e);
	assert_int_equal(shell_run(&om, &r, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_non_null(strstr(e.message, "cubicle-no-such-program"));
}

struct conc {
	int id;
	int ok;
};

static void *conc_thread(void *arg)
{
	struct conc *c = arg;
	char script[128], want[64];
	snprintf(script, sizeof script, "echo start-%d; echo err-%d >&2; exit %d", c->id, c->id,
		 c->id);
	snprintf(want, sizeof want, "start-%d\n", c->id);
	c->ok = 1;
	for (int i = 0; i < 25; i++) {
		const char *argv[] = {"bash", "-c", script, NULL};
		struct shell_opts o = {.argv = argv, .timeout_ms = 20000, .as.uid = (uid_t)-1};
		struct shell_result r;
		struct err e = {0};
		if (shell_run(&o, &r, &e) < 0) {
			c->ok = 0;
			break;
		}
		if (r.exit_code != c->id || strcmp(r.out, want) != 0 || r.timed_out)
			c->ok = 0;
		shell_result_free(&r);
	}
	return NULL;
}

static void test_concurrent_threads(void **state)
{
	/* A slow call on one thread while others run many short ones. */
	struct shell_result slow;
	pthread_t t[4];
	struct conc c[4];
	for (int i = 0; i < 4; i++) {
		c[i].id = i + 1;
		pthread_create(&t[i], NULL, conc_thread, &c[i]);
	}
	run_bash("sleep 0.5; echo slow", 20000, NULL, &slow);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_true(c[i].ok);
	}
	assert_string_equal(slow.out, "slow\n");
	shell_result_free(&slow);
}

static void test_run_as_nobody(void **state)
{
	if (geteuid() != 0)
		skip();
	struct shell_opts o = {.as = {.uid = NOBODY, .gid = NOBODY, .home = "/tmp"}};
	struct shell_result r;
	run_bash("echo \"$(id -u) $(id -g) $(id -G) $HOME $USER $PWD\"", 10000, &o, &r);
	assert_string_equal(r.out, "65534 65534 65534 /tmp nobody /tmp\n");
	shell_result_free(&r);
}

static void test_files_roundtrip(void **state)
{
	char dir[] = "/tmp/cubicle-test-files-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof path, "%s/a/b/c.bin", dir);
	unsigned char data[256];
	for (int i = 0; i < 256; i++)
		data[i] = (unsigned char)i;
	struct run_as me = {.uid = (uid_t)-1};
	struct err e = {0};
	assert_int_equal(files_write(&me, path, data, sizeof data, -1, &e), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	char *got;
	size_t len;
	assert_int_equal(files_read(&me, path, 1 << 20, &got, &len, &e), 0);
	assert_int_equal(len, 256);
	assert_memory_equal(got, data, 256);
	free(got);

	/* Rewrite keeps the mode unless told; an explicit mode is exact. */
	chmod(path, 0600);
	assert_int_equal(files_write(&me, path, "x", 1, -1, &e), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(files_write(&me, path, "x", 1, 0751, &e), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0751);

	/* Errors. */
	assert_int_equal(files_read(&me, path, 0, &got, &len, &e), -1);
	assert_int_equal(e.code, ERR_TOO_LARGE);
	assert_non_null(strstr(e.message, "/v1/files?path="));
	snprintf(path, sizeof path, "%s/missing", dir);
	assert_int_equal(files_read(&me, path, 100, &got, &len, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_non_null(strstr(e.message, path));
	assert_int_equal(files_read(&me, dir, 100, &got, &len, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "path");
	assert_int_equal(files_write(&me, dir, "x", 1, -1, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);

	/* A FIFO must never hang an open or a read. */
	snprintf(path, sizeof path, "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0644), 0);
	assert_int_equal(files_read(&me, path, 100, &got, &len, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	/* Nor a download: only regular files are served, both ways. */
	assert_int_equal(files_open_as(&me, path, O_RDONLY, 0, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_int_equal(files_open_as(&me, path, O_WRONLY, 0, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);

	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_files_run_as_nobody(void **state)
{
	if (geteuid() != 0)
		skip();
	char dir[] = "/tmp/cubicle-test-files-XXXXXX";
	assert_non_null(mkdtemp(dir));
	chmod(dir, 0777);
	struct run_as nobody = {.uid = NOBODY, .gid = NOBODY, .home = dir};
	struct err e = {0};
	/* Relative to home, parents created as the user. */
	assert_int_equal(files_write(&nobody, "sub/f.txt", "hi", 2, -1, &e), 0);
	char path[256];
	struct stat st;
	snprintf(path, sizeof path, "%s/sub", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_uid, NOBODY);
	snprintf(path, sizeof path, "%s/sub/f.txt", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_uid, NOBODY);
	assert_int_equal(st.st_gid, NOBODY);

	/* A root-only file is not readable as nobody; the thread is root again after. */
	snprintf(path, sizeof path, "%s/secret", dir);
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	char *got;
	size_t len;
	assert_int_equal(files_read(&nobody, path, 100, &got, &len, &e), -1);
	assert_int_equal(e.code, ERR_FORBIDDEN);
	struct run_as me = {.uid = (uid_t)-1};
	assert_int_equal(files_read(&me, path, 100, &got, &len, &e), 0);
	free(got);
	assert_int_equal(files_write(&nobody, "/root-owned-not-allowed/x", "x", 1, -1, &e), -1);
	assert_int_equal(e.code, ERR_FORBIDDEN);

	fd = files_open_as(&nobody, "stream/out.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644, &e);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_uid, NOBODY);
	close(fd);

	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exit_codes),
	    cmocka_unit_test(test_signals_reset),
	    cmocka_unit_test(test_stdout_stderr),
	    cmocka_unit_test(test_timeout_kills_group),
	    cmocka_unit_test(test_daemon_holding_pipe_does_not_hang),
	    cmocka_unit_test(test_truncation),
	    cmocka_unit_test(test_stdin),
	    cmocka_unit_test(test_env_and_cwd),
	    cmocka_unit_test(test_bad_cwd_and_program),
	    cmocka_unit_test(test_concurrent_threads),
	    cmocka_unit_test(test_run_as_nobody),
	    cmocka_unit_test(test_files_roundtrip),
	    cmocka_unit_test(test_files_run_as_nobody),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
