/*
 * byo: machines you bring (docs/byo.md). Nothing runs on this host: the
 * machine's envd dials cubicled and the core's link (host/core/byo.c)
 * presents it as UNIX sockets in the computer's directory, so this driver
 * only says where they are. A create never names it (available() says
 * why: such machines come from a connect token); stop and start are the
 * core's 409s; its lifecycle (running while connected, offline, deleted)
 * follows the link.
 */
#include "driver.h"

#include <stdio.h>

static bool byo_available(char *why, size_t len)
{
	snprintf(why, len,
		 "machines you bring connect themselves (POST /v1/connect-tokens, then run its "
		 "command on the machine)");
	return false;
}

static int byo_refuse(struct driver_computer *c, struct err *e)
{
	return err_set(e, ERR_CONFLICT,
		       "computer %s is a machine you brought: cubicle does not "
		       "power it",
		       c->id);
}

static int byo_nothing(struct driver_computer *c, struct err *e)
{
	(void)c;
	(void)e;
	return 0;
}

static bool byo_alive(struct driver_computer *c)
{
	(void)c;
	return true; /* the link says whether it is connected */
}

static int byo_envd_address(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	if ((size_t)snprintf(out, len, "unix:%s/io/envd.sock", c->dir) >= len)
		return err_set(e, ERR_INTERNAL, "the state directory's path is too long");
	return 0;
}

static int byo_vnc_path(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	if ((size_t)snprintf(out, len, "%s/io/vnc.sock", c->dir) >= len)
		return err_set(e, ERR_INTERNAL, "the state directory's path is too long");
	return 0;
}

const struct driver_ops driver_byo = {
    .name = "byo",
    .processes = "link",
    .available = byo_available,
    .create = byo_refuse,
    .start = byo_refuse,
    .stop = byo_nothing,
    .destroy = byo_nothing,
    .alive = byo_alive,
    .envd_address = byo_envd_address,
    .vnc_path = byo_vnc_path,
};
