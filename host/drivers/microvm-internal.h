/*
 * microvm's two halves (microvm.c, microvm-qemu.c): what they share.
 *
 * microvm.c is the driver (struct driver_ops: create, start, stop, the
 * snapshot, destroy); microvm-qemu.c writes QEMU's configuration and command
 * line and spawns it detached, in the computer's cgroup, as its uid.
 */
#ifndef CUBICLE_DRIVERS_MICROVM_INTERNAL_H
#define CUBICLE_DRIVERS_MICROVM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cgroup.h"
#include "driver.h"
#include "err.h"

#define VM_ENVD_PORT  7777 /* envd's port in the guest (cubicle-init) */
#define VM_TCG_TB_MB  128  /* TCG translation cache (QEMU's default is 1 GiB) */
#define VM_SESSION_FD 10   /* QEMU's fd of the session directory (-fsdev path) */
/* The kernel command line in vm/qemu.conf: -readconfig reads lines of at most
 * 1023 bytes (QEMU 7.2's qemu_config_parse), so `  append = "..."` holds at
 * most VM_APPEND_MAX (x86's own limit, 2048, is above it; microvm adds its
 * virtio_mmio.device= entries within that). VM_CMDLINE_MAX: buffers. */
#define VM_APPEND_MAX  1010
#define VM_CMDLINE_MAX 1024

/* microvm.c: c->dir/vm/name (name "" for vm/ itself), or an error when it
 * does not fit; how QEMU names the image directory (relative when pinned). */
int vm_path(const struct driver_computer *c, const char *name, char *out, size_t len,
	    struct err *e);
const char *vm_qemu_image(const struct driver_computer *c, const char *image);

/* A free TCP port on 127.0.0.1 for envd's forward, or -1. */
int vm_free_port(struct err *e);

/* Writes vm/qemu.conf (0600, owned by uid): the machine, the kernel and its
 * command line with envd's token and the egress policy `egress` (never in
 * QEMU's argv, which every host user can read). */
int vm_write_conf(struct driver_computer *c, const char *image, unsigned uid, const char *egress,
		  struct err *e);

/* QEMU's argv (relative paths in vm/): the accelerator, the size, the disk,
 * envd's forward from 127.0.0.1:port, the live view's socket for a desktop,
 * the session over 9p, -incoming defer when restoring. */
struct vm_args {
	char *v[48];
	int n;
	char bufs[8][256];
};
void vm_build_argv(const struct driver_computer *c, struct vm_args *a, const char *qemu, bool kvm,
		   int port, bool incoming);

/* Starts QEMU detached (own session), put in cg before it runs, as uid (and
 * the kvm group when kvm), with session_fd (or -1) as VM_SESSION_FD; records
 * qemu_pid and qemu_start in c->state. */
int vm_spawn(struct driver_computer *c, const struct cgroup_set *cg, char *const argv[],
	     unsigned uid, bool kvm, int session_fd, pid_t *out_pid, struct err *e);

#endif
