/*
 * sizes: what each computer size gets, enforced by the drivers (CPU quota,
 * memory limit, pids) and billed by the ledger (the multiplier of the unit
 * rate). Desktops: small medium large; sandboxes: xs sm md lg xl.
 */
#ifndef CUBICLE_SIZES_H
#define CUBICLE_SIZES_H

#include <stdbool.h>

#include "err.h"

struct size {
	const char *name;
	const char *kind; /* "desktop" | "sandbox" */
	int millicpus;
	long long memory_mb;
	long long disk_mb;
	int pids_max;
	int multiplier; /* of the unit rate */
};

/*
 * The size called `name` for `kind`, or NULL with ERR_INVALID (param
 * "size") listing the valid ones. A NULL name gives the kind's default
 * (small for desktops, sm for sandboxes).
 */
const struct size *size_find(const char *kind, const char *name, struct err *e);

#endif
