/*
 * trust: the operator's CA certificates in a guest's trust store
 * (envd/guest/trust.h), in a scratch tree (cmocka). A test CA made here
 * signs a leaf; after trust_install, OpenSSL verifies the leaf against the
 * bundle file alone, and no longer once the set is emptied. Restarts write
 * nothing; junk and too many certificates are refused.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "trust.h"

static char root[256];

static void mkdirs(const char *rel)
{
	char path[512], *p;
	snprintf(path, sizeof path, "%s%s", root, rel);
	for (p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	mkdir(path, 0755);
}

static char *slurp(const char *rel)
{
	char path[512];
	snprintf(path, sizeof path, "%s%s", root, rel);
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void put(const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s%s", root, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A certificate for cn, signed by (issuer, ikey), or self-signed. */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *ikey, bool ca)
{
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), ca ? 1 : 2);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, NID_basic_constraints,
						  ca ? "critical,CA:TRUE" : "CA:FALSE");
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	if (ca) {
		ext =
		    X509V3_EXT_conf_nid(NULL, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
		X509_add_ext(x, ext, -1);
		X509_EXTENSION_free(ext);
	}
	X509_sign(x, ikey ? ikey : key, EVP_sha256());
	return x;
}

static char *pem_of(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = strndup(p, (size_t)n);
	BIO_free(b);
	return s;
}

/* Whether leaf verifies against the bundle file alone. */
static bool verifies(X509 *leaf)
{
	char path[512];
	snprintf(path, sizeof path, "%s/etc/ssl/certs/ca-certificates.crt", root);
	X509_STORE *st = X509_STORE_new();
	bool ok = X509_STORE_load_file(st, path) == 1;
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	ok = ok && X509_STORE_CTX_init(ctx, st, leaf, NULL) == 1 && X509_verify_cert(ctx) == 1;
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	return ok;
}

static int count_links(void)
{
	char path[512];
	snprintf(path, sizeof path, "%s/etc/ssl/certs", root);
	DIR *d = opendir(path);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_type == DT_LNK)
			n++;
	if (d)
		closedir(d);
	return n;
}

static EVP_PKEY *ca_key, *leaf_key;
static X509 *ca, *ca2, *leaf;
static char *ca_pem, *ca2_pem, *debian;

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof root, "/tmp/pkgs-test-trust-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	mkdirs("/etc/ssl/certs");
	mkdirs("/usr/local/share/ca-certificates");
	/* Debian's bundle: another CA, not ours. */
	EVP_PKEY *other = EVP_EC_gen("P-256");
	X509 *deb = make_cert("Debian's own", other, NULL, NULL, true);
	debian = pem_of(deb);
	X509_free(deb);
	EVP_PKEY_free(other);
	put("/etc/ssl/certs/ca-certificates.crt", debian);
	ca_key = EVP_EC_gen("P-256");
	leaf_key = EVP_EC_gen("P-256");
	ca = make_cert("cubicle test CA", ca_key, NULL, NULL, true);
	ca2 = make_cert("cubicle test CA 2", leaf_key, NULL, NULL, true);
	leaf = make_cert("guest.example", leaf_key, ca, ca_key, false);
	ca_pem = pem_of(ca);
	ca2_pem = pem_of(ca2);
	trust_set_root(root);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return -1;
	X509_free(ca);
	X509_free(ca2);
	X509_free(leaf);
	EVP_PKEY_free(ca_key);
	EVP_PKEY_free(leaf_key);
	free(ca_pem);
	free(ca2_pem);
	free(debian);
	return 0;
}

static void test_install(void **state)
{
	(void)state;
	assert_false(verifies(leaf));
	char both[8192];
	snprintf(both, sizeof both, "junk before\n%s\n%s", ca_pem, ca2_pem);
	int n;
	bool changed;
	struct err e = {0};
	assert_int_equal(trust_install(both, strlen(both), &n, &changed, &e), 0);
	assert_int_equal(n, 2);
	assert_true(changed);
	assert_true(verifies(leaf));
	const char *bundle = slurp("/etc/ssl/certs/ca-certificates.crt");
	assert_true(strncmp(bundle, debian, strlen(debian)) == 0); /* Debian's first */
	assert_non_null(strstr(bundle, TRUST_MARKER "\n"));
	assert_null(strstr(bundle, "junk"));
	assert_non_null(slurp("/usr/local/share/ca-certificates/cubicle/cubicle-1.crt"));
	assert_non_null(slurp("/usr/local/share/ca-certificates/cubicle/cubicle-2.crt"));
	assert_int_equal(count_links(), 2);
	char alone[8192];
	snprintf(alone, sizeof alone, "%s%s", ca_pem, ca2_pem);
	assert_string_equal(slurp("/etc/ssl/cubicle-operator.pem"), alone);

	/* A restart with the same set writes nothing. */
	assert_int_equal(trust_install(both, strlen(both), &n, &changed, &e), 0);
	assert_false(changed);
	/* A new set replaces the block, never appends a second one. */
	assert_int_equal(trust_install(ca_pem, strlen(ca_pem), &n, &changed, &e), 0);
	assert_true(changed);
	assert_int_equal(n, 1);
	bundle = slurp("/etc/ssl/certs/ca-certificates.crt");
	const char *first = strstr(bundle, TRUST_MARKER);
	assert_non_null(first);
	assert_null(strstr(first + 1, TRUST_MARKER));
	assert_int_equal(count_links(), 1);
	assert_null(slurp("/usr/local/share/ca-certificates/cubicle/cubicle-2.crt"));
	assert_true(verifies(leaf));

	/* None: back to Debian's bundle alone. */
	assert_int_equal(trust_install("", 0, &n, &changed, &e), 0);
	assert_true(changed);
	assert_string_equal(slurp("/etc/ssl/certs/ca-certificates.crt"), debian);
	assert_string_equal(slurp("/etc/ssl/cubicle-operator.pem"), "");
	assert_int_equal(count_links(), 0);
	assert_false(verifies(leaf));
	assert_int_equal(trust_install("", 0, &n, &changed, &e), 0);
	assert_false(changed);
}

static void test_refused(void **state)
{
	(void)state;
	int n;
	bool changed;
	struct err e = {0};
	const char *junk =
	    "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n";
	assert_int_equal(trust_install(junk, strlen(junk), &n, &changed, &e), -1);
	assert_string_equal(e.param, "ca_certs");
	assert_int_equal(trust_install("hello", 5, &n, &changed, &e), -1);
	assert_string_equal(e.param, "ca_certs");
	/* More than TRUST_MAX_CERTS. */
	size_t one = strlen(ca_pem);
	char *many = malloc(one * (TRUST_MAX_CERTS + 1) + 1);
	for (int i = 0; i <= TRUST_MAX_CERTS; i++)
		memcpy(many + one * (size_t)i, ca_pem, one);
	many[one * (TRUST_MAX_CERTS + 1)] = '\0';
	assert_int_equal(trust_install(many, strlen(many), &n, &changed, &e), -1);
	assert_non_null(strstr(e.message, "more than"));
	free(many);
	/* Nothing was written by a refusal. */
	assert_string_equal(slurp("/etc/ssl/certs/ca-certificates.crt"), debian);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_install),
	    cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
