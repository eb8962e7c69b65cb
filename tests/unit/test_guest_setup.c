/*
 * guest-setup: what cubicled reads from --guest-ca-certs DIR and the URLs
 * it sends guests (host/core/guest-setup.h), against scratch directories
 * (cmocka): the .crt files in name order re-encoded, other names skipped,
 * a symbolic link to a certificate followed, and every bound a file that
 * breaks it stops at, naming the file.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "guest-setup.h"

static char dir[256];

static void put(const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void rm(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	unlink(path);
}

static char *cert_pem(const char *cn)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, k);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
				   (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	X509_sign(x, k, EVP_sha256());
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = strndup(p, (size_t)n);
	BIO_free(b);
	X509_free(x);
	EVP_PKEY_free(k);
	return s;
}

static char *a_pem, *b_pem;

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/pkgs-test-guestca-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	a_pem = cert_pem("A");
	b_pem = cert_pem("B");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	free(a_pem);
	free(b_pem);
	return system(cmd) == 0 ? 0 : -1;
}

/* The ca_certs the body holds, or NULL. */
static char *body_certs(const char *body)
{
	json_t *j = json_loads(body, 0, NULL);
	assert_non_null(j);
	const char *s = json_string_value(json_object_get(j, "ca_certs"));
	char *copy = s ? strdup(s) : NULL;
	json_decref(j);
	return copy;
}

static void test_dir(void **state)
{
	(void)state;
	put("b.crt", b_pem);
	char with_text[4096];
	snprintf(with_text, sizeof with_text, "# comment\n%s", a_pem);
	put("a.crt", with_text);
	put("notes.txt", "not a certificate");
	put("c.pem", "ignored: not .crt");
	char target[512], link[512];
	snprintf(target, sizeof target, "%s/a.crt", dir);
	snprintf(link, sizeof link, "%s/z-link.crt", dir);
	assert_int_equal(symlink(target, link), 0);
	char *body;
	int n, files;
	struct err e = {0};
	assert_int_equal(
	    guest_setup_build(dir, "http://198.51.100.7:8080/simple", NULL, &body, &n, &files, &e),
	    0);
	assert_int_equal(n, 3);
	assert_int_equal(files, 3);
	char *certs = body_certs(body);
	char want[8192];
	snprintf(want, sizeof want, "%s%s%s", a_pem, b_pem, a_pem); /* name order */
	assert_string_equal(certs, want);
	assert_non_null(strstr(body, "\"pip_index_url\":\"http://198.51.100.7:8080/simple\""));
	assert_null(strstr(body, "npm_registry"));
	assert_null(strstr(body, "comment"));
	free(certs);
	free(body);
	rm("z-link.crt");

	/* "none" and the missing default send no certificates. */
	assert_int_equal(guest_setup_build("none", NULL, NULL, &body, &n, &files, &e), 0);
	assert_int_equal(n, 0);
	assert_null(strstr(body, "ca_certs"));
	free(body);
	assert_int_equal(
	    guest_setup_build(NULL, NULL, "https://registry.example/", &body, &n, &files, &e), 0);
	free(body);
}

static void test_refused(void **state)
{
	(void)state;
	char *body = NULL;
	int n, files;
	struct err e = {0};
	/* An explicit directory that is not there. */
	assert_int_equal(
	    guest_setup_build("/nonexistent-pkgs-ca", NULL, NULL, &body, &n, &files, &e), -1);
	assert_non_null(strstr(e.message, "/nonexistent-pkgs-ca"));
	/* A .crt that is no certificate, named in the error. */
	put("bad.crt", "hello\n");
	assert_int_equal(guest_setup_build(dir, NULL, NULL, &body, &n, &files, &e), -1);
	assert_non_null(strstr(e.message, "bad.crt"));
	rm("bad.crt");
	/* Too large a file. */
	char *big = malloc(GUEST_CA_MAX_FILE + 2);
	memset(big, 'x', GUEST_CA_MAX_FILE + 1);
	big[GUEST_CA_MAX_FILE + 1] = '\0';
	put("big.crt", big);
	free(big);
	assert_int_equal(guest_setup_build(dir, NULL, NULL, &body, &n, &files, &e), -1);
	assert_non_null(strstr(e.message, "big.crt"));
	rm("big.crt");
	/* A directory named .crt. */
	char sub[512];
	snprintf(sub, sizeof sub, "%s/sub.crt", dir);
	mkdir(sub, 0755);
	assert_int_equal(guest_setup_build(dir, NULL, NULL, &body, &n, &files, &e), -1);
	assert_non_null(strstr(e.message, "not a regular file"));
	rmdir(sub);
	/* Too many files. */
	for (int i = 0; i <= GUEST_CA_MAX_FILES; i++) {
		char name[32];
		snprintf(name, sizeof name, "many-%02d.crt", i);
		put(name, a_pem);
	}
	assert_int_equal(guest_setup_build(dir, NULL, NULL, &body, &n, &files, &e), -1);
	assert_non_null(strstr(e.message, "more than"));
	for (int i = 0; i <= GUEST_CA_MAX_FILES; i++) {
		char name[32];
		snprintf(name, sizeof name, "many-%02d.crt", i);
		rm(name);
	}
	/* URLs a guest's configuration must not hold. */
	static const char *const bad[] = {"ftp://x/",	  "http://",	  "http://x/ y",
					  "http://x/\"y", "http://x/\ny", "file:///etc/passwd",
					  "-i http://x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_false(guest_setup_url_ok(bad[i]));
		assert_int_equal(guest_setup_build("none", bad[i], NULL, &body, &n, &files, &e),
				 -1);
		assert_int_equal(guest_setup_build("none", NULL, bad[i], &body, &n, &files, &e),
				 -1);
	}
	assert_true(guest_setup_url_ok("https://pypi.example/simple"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dir),
	    cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
