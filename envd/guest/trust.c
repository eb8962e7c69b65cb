/*
 * trust: installing the operator's certificates (see trust.h).
 */
#include "trust.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#define TRUST_DIR      "/usr/local/share/ca-certificates/cubicle"
#define TRUST_CERTS    "/etc/ssl/certs"
#define TRUST_BUNDLE   TRUST_CERTS "/ca-certificates.crt"
#define TRUST_ALONE    "/etc/ssl/cubicle-operator.pem"
#define TRUST_FILE_MAX (8u << 20) /* Debian's bundle is ~220 KB */

static const char *trust_root = "";

void trust_set_root(const char *root)
{
	trust_root = root && strcmp(root, "/") != 0 ? root : "";
}

static void trust_path(char *out, size_t len, const char *path)
{
	snprintf(out, len, "%s%s", trust_root, path);
}

/* A whole file (at most TRUST_FILE_MAX), NUL-terminated; NULL when missing. */
static char *trust_read(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= TRUST_FILE_MAX &&
	    (buf = malloc((size_t)st.st_size + 1))) {
		size_t got = 0;
		ssize_t n;
		while (got < (size_t)st.st_size &&
		       (n = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
			got += (size_t)n;
		buf[got] = '\0';
		*len = got;
	}
	close(fd);
	return buf;
}

/* Replaces path with data, atomically (a temporary file beside it, renamed). */
static int trust_write(const char *path, const char *data, size_t len, struct err *e)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.cubicle-new", path);
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "trust store: cannot write %s: %s", tmp,
			       strerror(errno));
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int saved = errno;
			close(fd);
			unlink(tmp);
			return err_set(e, ERR_UNAVAILABLE, "trust store: cannot write %s: %s", tmp,
				       strerror(saved));
		}
		off += (size_t)n;
	}
	if (fchmod(fd, 0644) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
		int saved = errno;
		unlink(tmp);
		return err_set(e, ERR_UNAVAILABLE, "trust store: cannot replace %s: %s", path,
			       strerror(saved));
	}
	return 0;
}

/* The certificates of pem, parsed; *n of them (at most TRUST_MAX_CERTS). */
static int trust_parse(const char *pem, size_t len, X509 **certs, int *n, struct err *e)
{
	*n = 0;
	if (len == 0)
		return 0;
	if (len > TRUST_MAX_BYTES)
		return err_param(e, "ca_certs", "ca_certs: more than %u bytes", TRUST_MAX_BYTES);
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	if (!b)
		return err_set(e, ERR_INTERNAL, "out of memory");
	for (;;) {
		ERR_clear_error();
		X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
		if (!x)
			break;
		if (*n == TRUST_MAX_CERTS) {
			X509_free(x);
			BIO_free(b);
			for (int i = 0; i < *n; i++)
				X509_free(certs[i]);
			*n = 0;
			return err_param(e, "ca_certs", "ca_certs: more than %d certificates",
					 TRUST_MAX_CERTS);
		}
		certs[(*n)++] = x;
	}
	unsigned long why = ERR_peek_last_error();
	BIO_free(b);
	/* The loop ends at the end of the text ("no start line"); anything
	 * else is a certificate that did not parse. */
	if (why && ERR_GET_REASON(why) != PEM_R_NO_START_LINE) {
		for (int i = 0; i < *n; i++)
			X509_free(certs[i]);
		*n = 0;
		return err_param(e, "ca_certs", "ca_certs: a certificate does not parse: %s",
				 ERR_reason_error_string(why) ? ERR_reason_error_string(why) : "?");
	}
	if (*n == 0)
		return err_param(e, "ca_certs", "ca_certs: no PEM certificate in %zu bytes", len);
	return 0;
}

/* Removes what an earlier start made: the .crt files and the links to them. */
static void trust_clear(void)
{
	char dir[4200], links[4200], path[4500], target[4200];
	trust_path(dir, sizeof dir, TRUST_DIR);
	trust_path(links, sizeof links, TRUST_CERTS);
	DIR *d = opendir(links);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		snprintf(path, sizeof path, "%s/%s", links, de->d_name);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n > 0) {
			target[n] = '\0';
			if (strncmp(target, TRUST_DIR "/", strlen(TRUST_DIR) + 1) == 0)
				unlink(path);
		}
	}
	if (d)
		closedir(d);
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
}

int trust_install(const char *pem, size_t len, int *count, bool *changed, struct err *e)
{
	*changed = false;
	X509 *certs[TRUST_MAX_CERTS];
	int n;
	if (trust_parse(pem, len, certs, &n, e) < 0)
		return -1;
	*count = n;
	int rc = -1;
	char *text = NULL;
	/* Their canonical text: what the files will hold. */
	BIO *all = BIO_new(BIO_s_mem());
	char **one = calloc((size_t)n + 1, sizeof *one);
	if (!all || !one) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		BIO *b = BIO_new(BIO_s_mem());
		char *p;
		long l;
		if (!b || !PEM_write_bio_X509(b, certs[i]) || !PEM_write_bio_X509(all, certs[i]) ||
		    (l = BIO_get_mem_data(b, &p)) <= 0 || !(one[i] = strndup(p, (size_t)l))) {
			BIO_free(b);
			err_set(e, ERR_INTERNAL, "out of memory");
			goto out;
		}
		BIO_free(b);
	}
	char *mem = NULL;
	long tl = BIO_get_mem_data(all, &mem);
	size_t text_len = tl > 0 ? (size_t)tl : 0;
	text = strndup(text_len ? mem : "", text_len);
	if (!text) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto out;
	}

	char alone[4200], bundle_path[4200], dir[4200], path[4500];
	trust_path(alone, sizeof alone, TRUST_ALONE);
	trust_path(bundle_path, sizeof bundle_path, TRUST_BUNDLE);
	trust_path(dir, sizeof dir, TRUST_DIR);
	size_t blen = 0, olen = 0;
	char *bundle = trust_read(bundle_path, &blen);
	char *old = trust_read(alone, &olen);
	if (!bundle) {
		err_set(e, ERR_UNAVAILABLE, "trust store: no %s (is ca-certificates installed?)",
			TRUST_BUNDLE);
		free(old);
		goto out;
	}
	char *mark = strstr(bundle, "\n" TRUST_MARKER "\n");
	size_t keep = mark ? (size_t)(mark - bundle) + 1 : blen;
	/* The fast path: the same set, already in the bundle (a restart). */
	bool same = old && olen == text_len && memcmp(old, text, text_len) == 0 &&
		    (n == 0 ? !mark : mark && strcmp(mark + strlen(TRUST_MARKER) + 2, text) == 0);
	free(old);
	if (same) {
		free(bundle);
		rc = 0;
		goto out;
	}
	*changed = true;
	trust_clear();
	if (n > 0 && mkdir(dir, 0755) < 0 && errno != EEXIST) {
		err_set(e, ERR_UNAVAILABLE, "trust store: mkdir %s: %s", dir, strerror(errno));
		free(bundle);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/cubicle-%d.crt", dir, i + 1);
		if (trust_write(path, one[i], strlen(one[i]), e) < 0) {
			free(bundle);
			goto out;
		}
		/* OpenSSL's lookup link: HASH.N, the first N free. */
		char links[4200], link[4500], target[300];
		trust_path(links, sizeof links, TRUST_CERTS);
		snprintf(target, sizeof target, TRUST_DIR "/cubicle-%d.crt", i + 1);
		unsigned long h = X509_subject_name_hash(certs[i]);
		for (int k = 0; k < 16; k++) {
			snprintf(link, sizeof link, "%s/%08lx.%d", links, h, k);
			if (symlink(target, link) == 0 || errno != EEXIST)
				break;
		}
	}
	/* The bundle: Debian's part, then ours. */
	size_t nlen = keep + (n ? strlen(TRUST_MARKER) + 1 + text_len : 0);
	char *nb = malloc(nlen + 2);
	if (!nb) {
		free(bundle);
		err_set(e, ERR_INTERNAL, "out of memory");
		goto out;
	}
	memcpy(nb, bundle, keep);
	size_t w = keep;
	if (w && nb[w - 1] != '\n')
		nb[w++] = '\n';
	if (n) {
		memcpy(nb + w, TRUST_MARKER "\n", strlen(TRUST_MARKER) + 1);
		w += strlen(TRUST_MARKER) + 1;
		memcpy(nb + w, text, text_len);
		w += text_len;
	}
	free(bundle);
	rc = trust_write(bundle_path, nb, w, e);
	free(nb);
	if (rc == 0)
		rc = trust_write(alone, text, text_len, e);
out:
	free(text);
	for (int i = 0; one && i < n; i++)
		free(one[i]);
	free(one);
	BIO_free(all);
	for (int i = 0; i < n; i++)
		X509_free(certs[i]);
	return rc;
}
