/*
 * userenv: the environment every process envd runs as the user gets on
 * top of envd's own: the image's /etc/cubicle/user.env (KEY=VALUE lines:
 * the PATH with the default virtual environment and the npm prefix, the
 * trust store's variables; rootfs/common.sh). Applied by shell.c (bash,
 * python, the package tools), launch.c and the desktop session, never to
 * envd itself: a directory the user can write first on root's PATH would
 * let the user plant programs that root runs.
 *
 * Loaded once, before envd starts its threads; a missing file (envd outside
 * a cubicle image) is an empty environment.
 */
#ifndef CUBICLE_USERENV_H
#define CUBICLE_USERENV_H

#define USERENV_FILE "/etc/cubicle/user.env"
#define USERENV_MAX  64 /* entries */

/* Reads path (USERENV_FILE when NULL): lines KEY=VALUE, '#' comments. */
void userenv_load(const char *path);

/* The entries, "KEY=VALUE", NULL-terminated (static: never freed). */
const char *const *userenv_entries(void);

#endif
