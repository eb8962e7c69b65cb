/*
 * kvmprobe: whether KVM runs guests at hardware speed on this host.
 *
 * /dev/kvm being there is not enough: a host that is itself a VM may offer
 * a paravirtual /dev/kvm (no VT-x/AMD-V in its CPU flags) that runs stock
 * kernels far slower than QEMU's TCG. Two checks, cheap and bounded:
 *
 *  1. kernel facts: /dev/kvm opens and answers KVM_GET_API_VERSION 12, and
 *     the CPU flags this kernel sees include vmx or svm (hardware
 *     virtualization it drives itself, bare metal or real nested);
 *  2. a timing probe: a tiny real-mode guest writes 576 KiB (144 pages,
 *     each a first touch the host has to map: an EPT violation on hardware,
 *     a trip through the outer hypervisor when nested), then does 2000
 *     port writes (each an exit to user space). Both must stay under 50 µs
 *     each: hardware does a few µs. The paravirtual KVM of the development
 *     machines does exits in ~20 µs but pages in ~1 ms, which is why a
 *     stock kernel, touching hundreds of thousands of pages, crawls there.
 *     It runs in a child killed after 2 s, so a KVM that hangs cannot hang
 *     cubicled.
 */
#ifndef CUBICLE_KVMPROBE_H
#define CUBICLE_KVMPROBE_H

#include <stdbool.h>
#include <stddef.h>

/* Runs the checks; `why` says what decided (for the log). */
bool kvmprobe_run(char *why, size_t len);

#endif
