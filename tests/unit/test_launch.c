/*
 * launch: Exec lines of .desktop files split by the Desktop Entry spec's
 * rules, and launch_app starting real programs (found by .desktop id in a
 * temporary $XDG_DATA_HOME or by name), reporting exec failures and leaving
 * no zombie behind.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "launch.h"

/* Checks that exec splits into exactly the NULL-terminated expected words. */
static void check_split(const char *exec, ...)
{
	struct err e = {0};
	char **argv = launch_exec_argv(exec, &e);
	assert_non_null(argv);
	va_list ap;
	va_start(ap, exec);
	size_t i = 0;
	for (const char *want; (want = va_arg(ap, const char *)); i++) {
		assert_non_null(argv[i]);
		assert_string_equal(argv[i], want);
	}
	va_end(ap);
	assert_null(argv[i]);
	launch_argv_free(argv);
}

static void test_exec_plain_and_field_codes(void **state)
{
	(void)state;
	check_split("firefox-esr %u", "firefox-esr", NULL);
	check_split("xfce4-terminal", "xfce4-terminal", NULL);
	check_split("  gimp-2.10   %U  ", "gimp-2.10", NULL);
	check_split("app %f %F %u %U %i %c %k --flag", "app", "--flag", NULL);
	check_split("app --file=%f", "app", "--file=", NULL);
	check_split("printf 100%%", "printf", "100%", NULL);
}

static void test_exec_quoting(void **state)
{
	(void)state;
	check_split("xterm -T \"two words\"", "xterm", "-T", "two words", NULL);
	check_split("sh -c \"echo \\\\$HOME \\\\\" done\"", "sh", "-c", "echo $HOME \" done", NULL);
	/* Unescaped \" (common in real files) is read leniently as a quote. */
	check_split("sh -c \"a \\\"b\\\" c\"", "sh", "-c", "a \"b\" c", NULL);
	/* String escapes come first: \s is a space, which splits unless quoted. */
	check_split("app a\\sb \"c\\sd\"", "app", "a", "b", "c d", NULL);
	/* Four backslashes in the file are one literal backslash in a quoted arg. */
	check_split("app \"x\\\\\\\\y\"", "app", "x\\y", NULL);
	check_split("app \"\"", "app", "", NULL);
	check_split("app pre\"mid dle\"post", "app", "premid dlepost", NULL);
}

static void test_exec_errors(void **state)
{
	(void)state;
	struct err e = {0};
	assert_null(launch_exec_argv("app \"unterminated", &e));
	assert_int_equal(e.code, ERR_INVALID);
	assert_non_null(strstr(e.message, "quote"));
	err_clear(&e);
	assert_null(launch_exec_argv("   ", &e));
	assert_int_equal(e.code, ERR_INVALID);
	err_clear(&e);
	assert_null(launch_exec_argv("%U", &e));
	assert_int_equal(e.code, ERR_INVALID);
}

static char tmpdir[] = "/tmp/cubicle-launch-XXXXXX";

static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

/* Waits up to 10 s for path to exist with content; returns it (static). */
static const char *wait_for_file(const char *path)
{
	static char buf[256];
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		if (f) {
			size_t n = fread(buf, 1, sizeof buf - 1, f);
			fclose(f);
			buf[n] = '\0';
			if (n > 0 && buf[n - 1] == '\n')
				return buf;
		}
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void assert_no_zombie_children(void)
{
	int status;
	pid_t r = waitpid(-1, &status, WNOHANG);
	assert_int_equal(r, -1);
	assert_int_equal(errno, ECHILD);
}

static void test_launch_desktop_id(void **state)
{
	(void)state;
	char dir[512], file[512], out[512], entry[1024];
	snprintf(dir, sizeof dir, "%s/applications", tmpdir);
	mkdir(dir, 0755);
	snprintf(out, sizeof out, "%s/out-desktop", tmpdir);
	snprintf(file, sizeof file, "%s/applications/cubicle-echo.desktop", tmpdir);
	snprintf(entry, sizeof entry,
		 "[Desktop Entry]\n# a comment\nType=Application\nName=Echo\n"
		 "Exec=sh -c \"echo \\\\\"$0 $1 $*\\\\\" > %s\" %%U\n"
		 "[Desktop Action other]\nExec=false\n",
		 out);
	write_file(file, entry, 0644);
	setenv("XDG_DATA_HOME", tmpdir, 1);

	const char *args[] = {"first", "second arg", NULL};
	struct launch_opts o = {.app = "cubicle-echo",
				.args = args,
				.display = ":99",
				.as = {(uid_t)-1, (gid_t)-1, NULL}};
	struct err e = {0};
	pid_t pid = 0;
	assert_int_equal(launch_app(&o, &pid, &e), 0);
	assert_true(pid > 0);
	const char *got = wait_for_file(out);
	assert_non_null(got);
	/* sh -c 'cmd' $0 $1...: the args follow the Exec line's own words. */
	assert_string_equal(got, "first second arg second arg\n");
	assert_no_zombie_children();

	/* The same id with its .desktop suffix. */
	unlink(out);
	o.app = "cubicle-echo.desktop";
	o.args = NULL;
	assert_int_equal(launch_app(&o, &pid, &e), 0);
	assert_non_null(wait_for_file(out));
	assert_no_zombie_children();
}

static void test_launch_program_environment(void **state)
{
	(void)state;
	char out[512], script[1024];
	snprintf(out, sizeof out, "%s/out-env", tmpdir);
	snprintf(script, sizeof script,
		 "echo \"$DISPLAY $HOME $(pwd) $$ $(ps -o sid= -p $$ | tr -d ' ')\" > %s", out);
	const char *args[] = {"-c", script, NULL};
	struct launch_opts o = {
	    .app = "sh", .args = args, .display = ":42", .as = {(uid_t)-1, (gid_t)-1, tmpdir}};
	struct err e = {0};
	pid_t pid = 0;
	assert_int_equal(launch_app(&o, &pid, &e), 0);
	const char *got = wait_for_file(out);
	assert_non_null(got);
	char want[1024];
	/* DISPLAY and HOME set, run in HOME, and the app leads its own session. */
	snprintf(want, sizeof want, ":42 %s %s %d %d\n", tmpdir, tmpdir, (int)pid, (int)pid);
	assert_string_equal(got, want);
	assert_no_zombie_children();
}

static void test_launch_run_as(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		skip();
		return;
	}
	/* As nobody: the app has that identity, with no supplementary group of
	 * root's, and HOME from run_as. */
	chmod(tmpdir, 0777);
	char out[512], script[1024];
	snprintf(out, sizeof out, "%s/out-run-as", tmpdir);
	snprintf(script, sizeof script, "echo \"$(id -u) $(id -g) $(id -G) $HOME\" > %s", out);
	const char *args[] = {"-c", script, NULL};
	struct launch_opts o = {
	    .app = "sh", .args = args, .display = ":42", .as = {65534, 65534, "/nonexistent-home"}};
	struct err e = {0};
	pid_t pid = 0;
	assert_int_equal(launch_app(&o, &pid, &e), 0);
	const char *got = wait_for_file(out);
	assert_non_null(got);
	assert_string_equal(got, "65534 65534 65534 /nonexistent-home\n");
	assert_no_zombie_children();
}

static void test_launch_not_found(void **state)
{
	(void)state;
	struct launch_opts o = {.app = "no-such-app-cubicle", .as = {(uid_t)-1, (gid_t)-1, NULL}};
	struct err e = {0};
	pid_t pid = 1;
	assert_int_equal(launch_app(&o, &pid, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_string_equal(e.param, "app");
	assert_non_null(strstr(e.message, "no-such-app-cubicle"));
	assert_int_equal(pid, 0);

	err_clear(&e);
	o.app = "";
	assert_int_equal(launch_app(&o, &pid, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "app");

	/* A .desktop file whose program is not installed. */
	char file[512];
	snprintf(file, sizeof file, "%s/applications", tmpdir);
	mkdir(file, 0755);
	setenv("XDG_DATA_HOME", tmpdir, 1);
	snprintf(file, sizeof file, "%s/applications/cubicle-missing.desktop", tmpdir);
	write_file(file, "[Desktop Entry]\nType=Application\nExec=/nonexistent/prog %F\n", 0644);
	err_clear(&e);
	o.app = "cubicle-missing";
	assert_int_equal(launch_app(&o, &pid, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_non_null(strstr(e.message, "/nonexistent/prog"));
	assert_no_zombie_children();
}

static void test_launch_exec_failure_reported(void **state)
{
	(void)state;
	/* Executable bits but no known format: execve itself fails (ENOEXEC). */
	char prog[512];
	snprintf(prog, sizeof prog, "%s/not-a-program", tmpdir);
	write_file(prog,
		   "\x7f"
		   "ELF this is not really a program",
		   0755);
	struct launch_opts o = {.app = prog, .as = {(uid_t)-1, (gid_t)-1, NULL}};
	struct err e = {0};
	pid_t pid = 1;
	assert_int_equal(launch_app(&o, &pid, &e), -1);
	assert_int_equal(e.code, ERR_INTERNAL);
	assert_string_equal(e.param, "app");
	assert_non_null(strstr(e.message, "format"));
	assert_int_equal(pid, 0);
	assert_no_zombie_children();
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(tmpdir))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_plain_and_field_codes),
	    cmocka_unit_test(test_exec_quoting),
	    cmocka_unit_test(test_exec_errors),
	    cmocka_unit_test(test_launch_desktop_id),
	    cmocka_unit_test(test_launch_program_environment),
	    cmocka_unit_test(test_launch_run_as),
	    cmocka_unit_test(test_launch_not_found),
	    cmocka_unit_test(test_launch_exec_failure_reported),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
