/*
 * files: `cubicle cp` through GET/PUT /v1/computers/{id}/files, streamed
 * between a file descriptor and the socket, so any size works in constant
 * memory. A download lands in a temporary file renamed over the target
 * once complete: an interrupted copy never leaves half a file behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* "ID:PATH" → id and path; a local path has no ':' before its first '/'. */
static bool files_remote(const char *arg, char *id, size_t id_len, const char **path)
{
	const char *colon = strchr(arg, ':');
	const char *slash = strchr(arg, '/');
	if (!colon || colon == arg || (slash && slash < colon))
		return false;
	snprintf(id, id_len, "%.*s", (int)(colon - arg), arg);
	*path = colon + 1;
	return true;
}

static const char *files_base(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

/* "/v1/computers/ID/files?path=P" */
static int files_url(char *buf, size_t len, const char *id, const char *path)
{
	snprintf(buf, len, "/v1/computers/%s/files", id);
	return api_query(buf, len, "path", path);
}

/* stdin that is not a regular file is spooled to an unnamed temporary file
 * first: the upload needs its length up front. */
static int files_spool_stdin(uint64_t *len)
{
	int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	char buf[1 << 16];
	ssize_t n;
	*len = 0;
	while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0) {
		if (write(fd, buf, (size_t)n) != n) {
			close(fd);
			return -1;
		}
		*len += (uint64_t)n;
	}
	if (n < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int files_upload(struct cli *cli, const char *local, const char *id, const char *path)
{
	struct stat st;
	int fd = strcmp(local, "-") == 0 ? dup(STDIN_FILENO) : open(local, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "cubicle: cannot read %s: %s\n", local, strerror(errno));
		if (fd >= 0)
			close(fd);
		return EXIT_API;
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return cli_usage("cp", "%s is a directory: cp copies one file", local);
	}
	uint64_t len = (uint64_t)st.st_size;
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		if ((fd = files_spool_stdin(&len)) < 0) {
			fprintf(stderr, "cubicle: cannot spool %s: %s\n", local, strerror(errno));
			return EXIT_API;
		}
	}
	/* A directory target takes the local file's name. */
	char target[4096], url[8800];
	size_t n = strlen(path);
	snprintf(target, sizeof target, "%s%s", path,
		 n == 0 || path[n - 1] == '/' ? files_base(local) : "");
	json_t *out = NULL;
	struct err e = {0};
	int rc = files_url(url, sizeof url, id, target) < 0 ? cli_usage("cp", "path too long")
		 : api_upload(cli, url, fd, len, target, &out, &e) < 0 ? cli_fail(&e)
								       : 0;
	close(fd);
	if (rc == 0 && cli->json)
		out_json(out);
	json_decref(out);
	return rc;
}

/* The temporary file next to `target` that becomes it. */
static int files_temp(const char *target, char *tmp, size_t len)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", target);
	snprintf(tmp, len, "%s/.%s.cubicle-XXXXXX", dirname(dir), files_base(target));
	return mkstemp(tmp);
}

static int files_download(struct cli *cli, const char *id, const char *path, const char *local)
{
	char url[8800], target[4096], tmp[4200];
	if (files_url(url, sizeof url, id, path) < 0)
		return cli_usage("cp", "path too long");
	struct err e = {0};
	if (strcmp(local, "-") == 0)
		return api_download(cli, url, STDOUT_FILENO, path, &e) < 0 ? cli_fail(&e) : 0;
	struct stat st;
	bool dir = stat(local, &st) == 0 && S_ISDIR(st.st_mode);
	snprintf(target, sizeof target, "%s%s%s", local, dir ? "/" : "",
		 dir ? files_base(path) : "");
	int fd = files_temp(target, tmp, sizeof tmp);
	if (fd < 0) {
		fprintf(stderr, "cubicle: cannot write %s: %s\n", target, strerror(errno));
		return EXIT_API;
	}
	int rc = api_download(cli, url, fd, path, &e) < 0 ? cli_fail(&e) : 0;
	/* mkstemp made it 0600; a copied file gets the usual mode. */
	mode_t mask = umask(0);
	umask(mask);
	fchmod(fd, 0666 & ~mask);
	bool written = close(fd) == 0;
	if (rc == 0 && (!written || rename(tmp, target) < 0)) {
		fprintf(stderr, "cubicle: cannot write %s: %s\n", target, strerror(errno));
		rc = EXIT_API;
	}
	if (rc)
		unlink(tmp);
	return rc;
}

int cmd_cp(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, 2);
	if (rc)
		return rc;
	char id[128];
	const char *path;
	bool from = files_remote(a->pos[0], id, sizeof id, &path);
	char id2[128];
	const char *path2;
	bool to = files_remote(a->pos[1], id2, sizeof id2, &path2);
	if (from == to)
		return cli_usage(a->cmd, "one side must be ID:PATH and the other a local file");
	if (to)
		return files_upload(cli, a->pos[0], id2, path2);
	if (!*path)
		return cli_usage(a->cmd, "%s: no path after the ':'", a->pos[0]);
	return files_download(cli, id, path, a->pos[1]);
}
