/*
 * guest-setup: what every container and microVM is told at each start,
 * before it counts as running: the operator's CA certificates, the pip
 * index and the npm registry (envd's POST /v1/setup, envd/guest/setup.h).
 * Not a machine you bring: its trust store and tools are its owner's
 * (struct driver_ops.guest_setup).
 *
 * The certificates come from `cubicled --guest-ca-certs DIR` (default
 * /usr/local/share/ca-certificates, Debian's place for local CAs; "none"
 * sends none), read once at startup: the *.crt files directly in DIR,
 * regular files (symbolic links to them are followed: the directory is the
 * operator's), each one or more PEM certificates that must all parse. The
 * directory is trusted but bounded: at most GUEST_CA_MAX_FILES files of
 * GUEST_CA_MAX_FILE bytes, GUEST_CA_MAX_CERTS certificates, and what is
 * sent is the certificates re-encoded from their parsed form, never the
 * files' bytes. A file that breaks a rule stops cubicled with its name.
 */
#ifndef CUBICLE_GUEST_SETUP_HOST_H
#define CUBICLE_GUEST_SETUP_HOST_H

#include <stdbool.h>

#include "err.h"

#define GUEST_CA_DEFAULT_DIR "/usr/local/share/ca-certificates"
#define GUEST_CA_MAX_FILES   64
#define GUEST_CA_MAX_FILE    (64 * 1024)
#define GUEST_CA_MAX_CERTS   64
#define GUEST_URL_MAX	     2048

/*
 * Builds the body of every start's setup: {"ca_certs", "pip_index_url",
 * "npm_registry"} (JSON text, malloc'd, in *body). ca_dir NULL or "none":
 * no certificates; a missing directory is an error unless it is the default
 * (a host without local CAs). Either URL may be NULL. *ncerts says how many
 * certificates were found, *files how many files.
 */
int guest_setup_build(const char *ca_dir, const char *pip_index_url, const char *npm_registry,
		      char **body, int *ncerts, int *files, struct err *e);

/* Whether s is an http:// or https:// URL a guest's configuration may hold
 * (printable ASCII, no quotes or spaces, at most GUEST_URL_MAX bytes). */
bool guest_setup_url_ok(const char *s);

#endif
