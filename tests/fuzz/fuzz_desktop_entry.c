/*
 * libFuzzer harness for .desktop files (envd/proc/launch.c): the launch
 * action reads the [Desktop Entry] of a file anyone in the guest can write
 * (~/.local/share/applications) and splits its Exec value into an argv.
 *
 * Input: byte 0 picks how the rest is read: as a whole file (through
 * launch_read_entry, from a memfd), or as an Exec value alone. Checked:
 * the reader never fails on a readable file; launch_exec_argv gives a
 * NULL-terminated argv of at least one word, or ERR_INVALID naming Exec;
 * no word holds a field code's '%' unless the file wrote "%%".
 */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

#include "../../envd/proc/launch.c"

static void check_exec(const char *exec)
{
	struct err e = {0};
	char **argv = launch_exec_argv(exec, &e);
	if (!argv) {
		CHECK(e.code == ERR_INVALID && e.message[0]);
		return;
	}
	CHECK(argv[0]);
	size_t n = 0;
	for (char **p = argv; *p; p++)
		n++;
	CHECK(n >= 1 && n <= strlen(exec));
	if (!strchr(exec, '%'))
		for (char **p = argv; *p; p++)
			CHECK(!strchr(*p, '%'));
	launch_argv_free(argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1) {
		char *exec = malloc(size);
		CHECK(exec);
		memcpy(exec, data + 1, size - 1);
		exec[size - 1] = 0;
		check_exec(exec);
		free(exec);
		return 0;
	}
	int fd = memfd_create("desktop", MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(write(fd, data + 1, size - 1) == (ssize_t)(size - 1));
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct launch_entry en;
	struct err e = {0};
	CHECK(launch_read_entry(path, &en, &e) == 0);
	if (en.exec)
		check_exec(en.exec);
	launch_entry_free(&en);
	close(fd);
	return 0;
}
