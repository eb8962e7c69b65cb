/*
 * driver: how a computer is isolated, behind one ops table.
 *
 * One file per driver (container.c, microvm.c) fills a `struct
 * driver_ops`. The core calls the table and never asks which driver it
 * holds. A driver keeps what it must remember about a running computer
 * (pids, cgroup paths, the envd address) in `c->state`, a JSON object the
 * core writes to SQLite before and after every call, so a restarted
 * cubicled can adopt a computer that kept running, or clean it up.
 *
 * Every call is blocking and may take seconds (the core runs it on a worker
 * thread); calls for one computer are never concurrent.
 */
#ifndef CUBICLE_DRIVER_H
#define CUBICLE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "err.h"

struct guest_net_list;

struct driver_computer {
	const char *id;		 /* "c-..." : safe in file names */
	const char *kind;	 /* "desktop" | "sandbox" */
	const char *image_dir;	 /* built image: rootfs/, disk.ext4, vmlinuz, initrd.img */
	const char *dir;	 /* the computer's own host directory (exists; the
				    driver owns what is inside) */
	const char *session_dir; /* host directory to mount at /session, or NULL */
	const char *envd_token;	 /* the token envd must require (never logged) */
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
};

struct driver_ops {
	const char *name; /* "container" | "vm" */

	/* Whether this driver can run on this host; `why` says what is missing. */
	bool (*available)(char *why, size_t len);

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
};

extern const struct driver_ops driver_container;
extern const struct driver_ops driver_vm;

/* Whether microVMs run on KVM at hardware speed here (probed once, see
 * kvmprobe.h; $CUBICLE_VM_ACCEL=kvm|tcg forces the answer). */
bool driver_vm_kvm_usable(void);

#endif
