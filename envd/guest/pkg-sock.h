/*
 * pkg-sock: the package helper's UNIX socket, and its client.
 *
 * `envd --package-helper PATH` serves the socket (mode 0666 in a directory
 * of root's): the user's `apt-get` and `apt` are envd under those names
 * (/usr/local/bin/apt-get -> envd, rootfs/common.sh), which
 *
 *   - run the real /usr/bin/apt-get or /usr/bin/apt when they need no root
 *     (pkg_apt_route: show, search, download, a simulation...) or the
 *     caller is root;
 *   - else send the command line and their stdout and stderr descriptors
 *     to the socket and exit with the status that comes back.
 *
 * The protocol, over SOCK_SEQPACKET: one request message holding the
 * program name and the arguments, each NUL-terminated (at most 64 KiB, 257
 * words), with exactly two descriptors (SCM_RIGHTS: where the output
 * goes); one answer message, "exit N" or "error MESSAGE". The server takes
 * the caller's uid and pid from the socket (SO_PEERCRED), never from the
 * request, checks the words with pkg-policy.h and runs pkg_apt with a
 * deadline of PKG_SOCK_TIMEOUT_S. At most PKG_SOCK_CLIENTS connections are
 * served at once (the rest get "error busy").
 */
#ifndef CUBICLE_PKG_SOCK_H
#define CUBICLE_PKG_SOCK_H

#include "err.h"

#define PKG_SOCK_DEFAULT   "/run/envd/pkg.sock"
#define PKG_SOCK_TIMEOUT_S 1800
#define PKG_SOCK_CLIENTS   8
#define PKG_SOCK_MSG_MAX   65536

/* Starts serving PATH (its directory is made 0755 if missing; a stale
 * socket is replaced) on a thread of its own. */
int pkg_sock_start(const char *path, struct err *e);

/* The client: main() of envd run as `apt-get` or `apt` (prog). The socket is
 * $CUBICLE_PKG_SOCK, else PKG_SOCK_DEFAULT. Never returns. */
_Noreturn void pkg_client_main(const char *prog, int argc, char **argv);

#endif
