/*
 * guest-setup: the operator's settings for guests (see guest-setup.h).
 */
#include "guest-setup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

bool guest_setup_url_ok(const char *s)
{
	size_t n = strlen(s);
	if ((strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0) ||
	    n > GUEST_URL_MAX || n <= 8)
		return false;
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p >= 127 || *p == '"' || *p == '\'' || *p == '\\')
			return false;
	return true;
}

/* Appends the certificates of one file to out; how many, or -1 with e. */
static int guest_ca_file(const char *dir, const char *name, BIO *out, int room, struct err *e)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int saved = errno;
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_INVALID, "--guest-ca-certs: cannot read %s: %s", path,
			       strerror(saved));
	}
	if (!S_ISREG(st.st_mode) || st.st_size > GUEST_CA_MAX_FILE || st.st_size == 0) {
		close(fd);
		return err_set(e, ERR_INVALID,
			       "--guest-ca-certs: %s is %s (a .crt must be a PEM file of at most "
			       "%d bytes)",
			       path,
			       !S_ISREG(st.st_mode) ? "not a regular file"
			       : st.st_size == 0    ? "empty"
						    : "too large",
			       GUEST_CA_MAX_FILE);
	}
	char *buf = malloc((size_t)st.st_size);
	size_t got = 0;
	ssize_t r;
	while (buf && got < (size_t)st.st_size &&
	       (r = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
		got += (size_t)r;
	close(fd);
	if (!buf)
		return err_set(e, ERR_INTERNAL, "out of memory");
	BIO *in = BIO_new_mem_buf(buf, (int)got);
	int n = 0;
	for (;;) {
		ERR_clear_error();
		X509 *x = in ? PEM_read_bio_X509(in, NULL, NULL, NULL) : NULL;
		if (!x)
			break;
		if (n == room) {
			X509_free(x);
			n = -2;
			break;
		}
		PEM_write_bio_X509(out, x);
		X509_free(x);
		n++;
	}
	unsigned long why = ERR_peek_last_error();
	BIO_free(in);
	free(buf);
	if (n == -2)
		return err_set(e, ERR_INVALID, "--guest-ca-certs: more than %d certificates in %s",
			       GUEST_CA_MAX_CERTS, dir);
	if ((why && ERR_GET_REASON(why) != PEM_R_NO_START_LINE) || n == 0)
		return err_set(e, ERR_INVALID,
			       "--guest-ca-certs: %s holds %s (each .crt must be PEM certificates)",
			       path,
			       n ? "a certificate that does not parse" : "no PEM certificate");
	return n;
}

static int guest_ca_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The certificates of dir, re-encoded, into out (PEM text, malloc'd). */
static int guest_ca_dir(const char *dir, bool must_exist, char **out, int *ncerts, int *nfiles,
			struct err *e)
{
	*out = NULL;
	*ncerts = *nfiles = 0;
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT && !must_exist)
			return 0;
		return err_set(e, ERR_INVALID, "--guest-ca-certs %s: %s", dir, strerror(errno));
	}
	char *names[GUEST_CA_MAX_FILES];
	int n = 0;
	struct dirent *de;
	int rc = 0;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l < 5 || strcmp(de->d_name + l - 4, ".crt") != 0)
			continue;
		if (n == GUEST_CA_MAX_FILES) {
			rc = err_set(e, ERR_INVALID, "--guest-ca-certs %s: more than %d .crt files",
				     dir, GUEST_CA_MAX_FILES);
			break;
		}
		if (!(names[n] = strdup(de->d_name))) {
			rc = err_set(e, ERR_INTERNAL, "out of memory");
			break;
		}
		n++;
	}
	closedir(d);
	/* In name order, like update-ca-certificates. */
	qsort(names, (size_t)n, sizeof names[0], guest_ca_cmp);
	BIO *pem = BIO_new(BIO_s_mem());
	for (int i = 0; rc == 0 && i < n; i++) {
		int got = guest_ca_file(dir, names[i], pem, GUEST_CA_MAX_CERTS - *ncerts, e);
		if (got < 0)
			rc = -1;
		else
			*ncerts += got;
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	*nfiles = n;
	if (rc == 0 && *ncerts) {
		char *mem;
		long len = BIO_get_mem_data(pem, &mem);
		if (len <= 0 || !(*out = strndup(mem, (size_t)len)))
			rc = err_set(e, ERR_INTERNAL, "out of memory");
	}
	BIO_free(pem);
	return rc;
}

int guest_setup_build(const char *ca_dir, const char *pip_index_url, const char *npm_registry,
		      char **body, int *ncerts, int *files, struct err *e)
{
	*body = NULL;
	*ncerts = *files = 0;
	if (pip_index_url && !guest_setup_url_ok(pip_index_url))
		return err_set(e, ERR_INVALID,
			       "--pip-index-url %s: an http:// or https:// URL (printable, no "
			       "spaces or quotes)",
			       pip_index_url);
	if (npm_registry && !guest_setup_url_ok(npm_registry))
		return err_set(e, ERR_INVALID,
			       "--npm-registry %s: an http:// or https:// URL (printable, no "
			       "spaces or quotes)",
			       npm_registry);
	char *pem = NULL;
	if (ca_dir && strcmp(ca_dir, "none") != 0 &&
	    guest_ca_dir(ca_dir, strcmp(ca_dir, GUEST_CA_DEFAULT_DIR) != 0, &pem, ncerts, files,
			 e) < 0)
		return -1;
	json_t *j = json_pack("{s:s*, s:s*, s:s*}", "ca_certs", pem, "pip_index_url", pip_index_url,
			      "npm_registry", npm_registry);
	free(pem);
	*body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!*body)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}
