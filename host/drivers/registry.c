/*
 * registry: the drivers this build has, in order. Adding a driver is its
 * own file (a `const struct driver_ops`) plus one line in `registry` below
 * and its extern in driver.h; the core, the API's validation, the MCP
 * schema and the default isolation all follow from this table.
 */
#include "driver.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static struct driver_slot {
	const struct driver_ops *ops;
	char why[256]; /* "" when it can run here */
} registry[] = {
    {&driver_container, ""},
    {&driver_vm, ""},
    {&driver_byo, ""},
};

#define N_DRIVERS (sizeof registry / sizeof registry[0])

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static const struct driver_ops *default_driver;

static void drivers_probe_once(void)
{
	const struct driver_ops *first = NULL, *preferred = NULL;
	for (size_t i = 0; i < N_DRIVERS; i++) {
		struct driver_slot *s = &registry[i];
		s->why[0] = 0;
		if (!s->ops->available(s->why, sizeof s->why) && !s->why[0])
			snprintf(s->why, sizeof s->why, "unknown reason");
		if (s->why[0]) {
			fprintf(stderr, "cubicled: the %s driver is not usable here: %s\n",
				s->ops->name, s->why);
			continue;
		}
		if (!first)
			first = s->ops;
		if (!preferred && s->ops->preferred && s->ops->preferred())
			preferred = s->ops;
	}
	default_driver = preferred ? preferred : first ? first : registry[0].ops;
	fprintf(stderr, "cubicled: default isolation: %s\n", default_driver->name);
}

void drivers_probe(void)
{
	pthread_once(&probe_once, drivers_probe_once);
}

const struct driver_ops *driver_find(const char *name)
{
	for (size_t i = 0; name && i < N_DRIVERS; i++)
		if (strcasecmp(registry[i].ops->name, name) == 0)
			return registry[i].ops;
	return NULL;
}

const struct driver_ops *driver_at(size_t i)
{
	return i < N_DRIVERS ? registry[i].ops : NULL;
}

const char *driver_why(const struct driver_ops *d)
{
	for (size_t i = 0; i < N_DRIVERS; i++)
		if (registry[i].ops == d)
			return registry[i].why;
	return "not a registered driver";
}

const struct driver_ops *driver_default(void)
{
	drivers_probe();
	return default_driver;
}

void driver_names(const char *sep, char *out, size_t len)
{
	size_t n = 0;
	if (len)
		out[0] = 0;
	for (size_t i = 0; i < N_DRIVERS && n < len; i++)
		n +=
		    (size_t)snprintf(out + n, len - n, "%s%s", i ? sep : "", registry[i].ops->name);
}

/* ---- the stand-in for a computer whose isolation has no driver ------------------- */

static int missing(struct err *e)
{
	return err_set(e, ERR_CONFLICT, "this cubicled has no driver for the computer's isolation");
}
static bool missing_available(char *why, size_t len)
{
	snprintf(why, len, "not built in");
	return false;
}
static int missing_call(struct driver_computer *dc, struct err *e)
{
	(void)dc;
	return missing(e);
}
static bool missing_alive(struct driver_computer *dc)
{
	(void)dc;
	return false;
}
static int missing_path(const struct driver_computer *dc, char *out, size_t len, struct err *e)
{
	(void)dc;
	if (len)
		out[0] = 0;
	return missing(e);
}
const struct driver_ops driver_missing = {
    .name = "",
    .processes = "processes",
    .available = missing_available,
    .create = missing_call,
    .start = missing_call,
    .stop = missing_call,
    .destroy = missing_call,
    .alive = missing_alive,
    .envd_address = missing_path,
    .vnc_path = missing_path,
};
