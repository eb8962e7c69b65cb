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
 *  2. a timing probe: a 16-byte real-mode guest does 2000 port writes, each
 *     a VM exit to user space; the mean round trip must stay under 50 µs
 *     (a few µs on hardware, ~10-30 µs nested). It runs in a child killed
 *     after 2 s, so a KVM that hangs cannot hang cubicled.
 */
#ifndef CUBICLE_KVMPROBE_H
#define CUBICLE_KVMPROBE_H

#include <stdbool.h>
#include <stddef.h>

/* Runs the checks; `why` says what decided (for the log). */
bool kvmprobe_run(char *why, size_t len);

#endif
