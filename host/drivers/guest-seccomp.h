/*
 * guest-seccomp: the system call filter every process of a container
 * computer runs under.
 *
 * It denies (EPERM) what Docker's default profile (moby's
 * profiles/seccomp/default.json) denies to a container without extra
 * capabilities: kernel modules, kexec, bpf, perf_event_open, the key ring,
 * mounting and namespace games (mount, umount2, pivot_root, unshare, setns,
 * namespace flags to clone, the new mount API), sethostname, ptrace and
 * cross-process memory access, NUMA policy and page migration (mbind,
 * set_mempolicy, move_pages...), reboot, swap, the clock, acct, quotas,
 * syslog, file handles (open_by_handle_at, name_to_handle_at), userfaultfd,
 * io_uring, raw I/O ports, vsock sockets and personalities that turn off
 * ASLR; and the obsolete calls (uselib, ustat, sysfs, _sysctl, nfsservctl,
 * vm86...). Stricter than Docker where a desktop has no use for the call
 * (ptrace, name_to_handle_at, io_uring). Everything else is allowed:
 * threads (clone without namespace flags), setresuid/setgroups for envd to
 * run commands as the user, and what Xvfb, Xfce and Firefox need. clone3
 * answers ENOSYS, because its flags live in memory a filter cannot read, so
 * glibc falls back to clone whose flags it can. System calls of another
 * architecture (int 0x80 on x86-64) kill the process: the filter only
 * speaks the native one.
 *
 * The filter is compiled in the calling process (where allocating is fine)
 * into a classic BPF program that a freshly cloned child installs with one
 * prctl() right before exec.
 */
#ifndef CUBICLE_GUEST_SECCOMP_H
#define CUBICLE_GUEST_SECCOMP_H

#include <linux/filter.h>

#include "err.h"

/* Compiles the filter into out (out->filter is malloc'd: guest_seccomp_free). */
int guest_seccomp_build(struct sock_fprog *out, struct err *e);
void guest_seccomp_free(struct sock_fprog *prog);

#endif
