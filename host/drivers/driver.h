/*
 * driver: how a computer is isolated, behind one ops table.
 *
 * One file per driver (container.c, microvm.c) fills a `struct
 * driver_ops`; one line in registry.c's table registers it. The core finds
 * a computer's driver by its isolation name (driver_find) and never asks
 * which driver it holds; the isolations a create may name, why each cannot
 * run here and the default all come from the registry. A driver keeps what it must remember about a
 * running computer (pids, cgroup paths, the envd address) in `c->state`, a JSON object the core
 * writes to SQLite before and after every call, so a restarted cubicled can adopt a computer that
 * kept running, or clean it up.
 *
 * Every call is blocking and may take seconds (the core runs it on a worker
 * thread); calls for one computer are never concurrent.
 */
#ifndef CUBICLE_DRIVER_H
#define CUBICLE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "err.h"

struct guest_net_list;
struct layer_stats;

struct driver_computer {
	const char *id;		 /* "c-..." : safe in file names */
	const char *kind;	 /* "desktop" | "sandbox" */
	const char *image_dir;	 /* built image: rootfs/, disk.ext4, vmlinuz, initrd.img */
	const char *dir;	 /* the computer's own host directory (exists; the
				    driver owns what is inside) */
	const char *session_dir; /* host directory to mount at /session, or NULL */
	const char *envd_token;	 /* the token envd must require (never logged) */
	const char *envd_user;	 /* who envd runs commands and files as: NULL = "user";
				    "root" only for a template's build (template.h) */
	int width, height;	 /* desktop resolution */
	int millicpus;		 /* CPU quota: 500 = half a CPU, 2000 = two */
	long long memory_mb;	 /* hard memory limit */
	long long disk_mb;	 /* disk quota where the filesystem allows; 0 = none */
	int pids_max;		 /* process limit */
	json_t *state;		 /* the driver's persisted state: an object the core
				    owns; the driver reads and updates it in place */
	char accel[8];		 /* set by start: "kvm" | "tcg" for a microVM, else "" */
	/* The egress policy's explicit lists (guest-net.h), the server's and the
	 * workspace's merged; NULL = none. Applied at each start (a microVM
	 * restored from its snapshot keeps the policy of its cold boot, so one
	 * whose policy changed boots cold). */
	const struct guest_net_list *egress_allow, *egress_deny;
	/* cubicled --guest-sizes off: a container shows the host's CPUs,
	 * memory and uptime (its affinity, /proc files and time namespace are
	 * left alone; container-boot.h, "boot_sizes"). A microVM shows its own
	 * whatever this says. */
	bool host_sizes;
};

struct driver_ops {
	/* The isolation's name in the API and the store ("container", "vm"):
	 * lower-case letters, at most 15 bytes. */
	const char *name;
	/* What of a running computer can die under it, for the error a dead
	 * computer gets ("its <processes> ended while it was running"). */
	const char *processes;

	/* Whether the core sets the guest up at each start (the operator's CA
	 * certificates, pip index, npm registry: host/core/guest-setup.h): true
	 * for cubicle's own computers, false for a machine you bring. */
	bool guest_setup;

	/* Whether the core asks the guest to write its dirty pages to disk
	 * (envd runs sync) before stop: a guest with a kernel of its own, whose
	 * page cache is lost with its RAM when the snapshot taken at stop does
	 * not restore and the next start boots cold (the microVM). A
	 * container's files are the host kernel's already. */
	bool sync_before_stop;

	/* Whether this driver can run on this host; `why` says what is missing. */
	bool (*available)(char *why, size_t len);

	/* Whether a create that names no isolation should get this driver when
	 * it is available (a microVM on KVM); NULL = never preferred. Asked once,
	 * after available() said yes. */
	bool (*preferred)(void);

	/* Prepares the disk (overlay upper dir, qcow2 overlay). Fast; nothing runs. */
	int (*create)(struct driver_computer *c, struct err *e);

	/*
	 * Boots the computer with its limits and returns once envd accepts
	 * connections at envd_address() (the desktop may still be starting:
	 * the core polls envd's /health for ready). The computer must outlive
	 * cubicled: its processes are not cubicled's children in a way that a
	 * cubicled crash would kill them.
	 */
	int (*start)(struct driver_computer *c, struct err *e);

	/* Stops every process, keeping the disk (files, settings) for start. */
	int (*stop)(struct driver_computer *c, struct err *e);

	/* Removes everything: processes, mounts, cgroups, network namespace and
	 * helpers, and the files in c->dir. Idempotent: works on a computer
	 * that is half created, stopped, running or already gone. */
	int (*destroy)(struct driver_computer *c, struct err *e);

	/* After a cubicled restart: whether the computer in c->state still runs
	 * (the recorded processes exist and are the same ones: compare start
	 * times, pids get reused). */
	bool (*alive)(struct driver_computer *c);

	/* Where envd listens: "unix:/path" or "tcp:127.0.0.1:port". */
	int (*envd_address)(const struct driver_computer *c, char *out, size_t len, struct err *e);

	/* Where a desktop's envd serves RFB (its live view) for the stream
	 * gateway: a UNIX socket path on the host. */
	int (*vnc_path)(const struct driver_computer *c, char *out, size_t len, struct err *e);

	/*
	 * Optional (NULL: this driver cannot build templates). Copies what a
	 * stopped computer changed over its image (a container's overlay upper
	 * dir) into dest, a directory it creates, as a template layer
	 * (layer.h: owners as the guest sees them, no setuid bit, no device,
	 * whiteouts kept); at most max_bytes of file data, else ERR_TOO_LARGE.
	 */
	int (*export_layer)(struct driver_computer *c, const char *dest, uint64_t max_bytes,
			    struct layer_stats *st, struct err *e);
};

extern const struct driver_ops driver_container;
extern const struct driver_ops driver_vm;
extern const struct driver_ops driver_byo; /* machines you bring (byo.c) */

/* ---- the registry (registry.c) ---------------------------------------------------- */

/*
 * Asks every registered driver whether it can run here (once per process;
 * later calls do nothing), logs why the ones that cannot, and picks the
 * default isolation: the first available driver that is preferred, else the
 * first available one, else the first registered (whose reason then answers
 * every create). Call it before any other registry function.
 */
void drivers_probe(void);

/* The driver named `name` (an isolation, in any case: "VM" is "vm"), or NULL
 * when none is registered. */
const struct driver_ops *driver_find(const char *name);
/* The registry's i-th driver, or NULL past the last (for /metrics). */
const struct driver_ops *driver_at(size_t i);

/* Why d cannot run here, or "" when it can (after drivers_probe). */
const char *driver_why(const struct driver_ops *d);

/* What a computer whose isolation no registered driver has (a database
 * written by a build with another driver) is driven by: every call fails
 * (ERR_CONFLICT) and alive() is false, so no driver ever acts on another's
 * computer. Not in the registry: driver_find never returns it. */
extern const struct driver_ops driver_missing;

/* The driver of a create that names no isolation (after drivers_probe). */
const struct driver_ops *driver_default(void);

/* The registered drivers' names joined by sep ("container|vm" for "|"), for
 * messages and schemas; cut short when len is too small. */
void driver_names(const char *sep, char *out, size_t len);

#endif
