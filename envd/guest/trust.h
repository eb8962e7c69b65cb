/*
 * trust: the operator's CA certificates in the guest's trust store.
 *
 * A host behind a TLS-inspecting proxy trusts an extra CA; its guests must
 * too, or curl, pip, npm and git fail with "self-signed certificate in
 * certificate chain". cubicled reads them once (`--guest-ca-certs DIR`,
 * host/core/guest-setup.h) and sends them at each start (POST /v1/setup);
 * this installs them the way Debian's update-ca-certificates would, without
 * its cost (a shell script that rehashes every certificate: 2.7-4.5 s per
 * run in a sandbox here, at load 16; this: a few milliseconds):
 *
 *   /usr/local/share/ca-certificates/cubicle/cubicle-N.crt  one per
 *       certificate (so a later update-ca-certificates, which apt runs when
 *       a package brings certificates, keeps them)
 *   /etc/ssl/certs/ca-certificates.crt  the system bundle (OpenSSL's default
 *       file: curl, git, Python's ssl, SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
 *       PIP_CERT): Debian's, then a block of them after the line
 *       TRUST_MARKER (replaced, never appended twice)
 *   /etc/ssl/certs/HASH.N  OpenSSL's lookup links by subject hash
 *   /etc/ssl/cubicle-operator.pem  them alone (NODE_EXTRA_CA_CERTS:
 *       Node keeps its own list and adds this file's; outside certs/, where
 *       openssl rehash would warn about a file of several certificates)
 *
 * The variables are the image's (/etc/cubicle/user.env, rootfs/common.sh).
 * An empty set removes what an earlier start installed. Certificates are
 * parsed and written back from their parsed form, so nothing but
 * certificates reaches the files.
 */
#ifndef CUBICLE_TRUST_H
#define CUBICLE_TRUST_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define TRUST_MAX_CERTS 64
#define TRUST_MAX_BYTES (1u << 20)
#define TRUST_MARKER	"# cubicle: the operator's certificates (cubicled --guest-ca-certs)"

/* Where the store lives; tests point it at a scratch tree (NULL: "/"). */
void trust_set_root(const char *root);

/*
 * Installs the certificates of pem (len bytes; 0 = none). *count is how many
 * there are, *changed whether anything was written (an unchanged set, as at
 * a restart, writes nothing). ERR_INVALID (param "ca_certs") when pem is not
 * certificates or holds too many.
 */
int trust_install(const char *pem, size_t len, int *count, bool *changed, struct err *e);

#endif
