/*
 * kvmprobe: see kvmprobe.h.
 */
#include "kvmprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_EXITS	   2000
#define PROBE_MAX_EXIT_US  50
#define PROBE_TIMEOUT_S	   2

/* Whether /proc/cpuinfo's flags name vmx or svm. */
static bool kp_cpu_has_virt(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	if (!f)
		return false;
	char line[4096];
	bool yes = false;
	while (!yes && fgets(line, sizeof line, f))
		if (strncmp(line, "flags", 5) == 0)
			yes = strstr(line, " vmx") || strstr(line, " svm");
	fclose(f);
	return yes;
}

/*
 * The guest, at 0x1000 in real mode:
 *   mov cx, PROBE_EXITS ; again: out 0x10, al ; loop again ; hlt
 * Returns the mean µs per exit, or -1.
 */
static long kp_time_exits(int kvm)
{
	static const unsigned char code[] = {0xb9, PROBE_EXITS & 0xff, PROBE_EXITS >> 8,
					     0xe6, 0x10, 0xe2, 0xfc, 0xf4};
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		return -1;
	unsigned char *mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return -1;
	memcpy(mem, code, sizeof code);
	struct kvm_userspace_memory_region r = {.slot = 0,
						 .guest_phys_addr = 0x1000,
						 .memory_size = 0x1000,
						 .userspace_addr = (unsigned long)mem};
	int cpu = -1;
	long size = -1;
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &r) < 0 ||
	    (cpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0 ||
	    (size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0)) <= 0)
		return -1;
	struct kvm_run *run = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, cpu, 0);
	struct kvm_sregs s;
	if (run == MAP_FAILED || ioctl(cpu, KVM_GET_SREGS, &s) < 0)
		return -1;
	s.cs.base = 0;
	s.cs.selector = 0;
	struct kvm_regs regs = {.rip = 0x1000, .rflags = 2};
	if (ioctl(cpu, KVM_SET_SREGS, &s) < 0 || ioctl(cpu, KVM_SET_REGS, &regs) < 0)
		return -1;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int exits = 0;; exits++) {
		if (ioctl(cpu, KVM_RUN, 0) < 0)
			return -1;
		if (run->exit_reason == KVM_EXIT_HLT)
			break;
		if (run->exit_reason != KVM_EXIT_IO || exits > PROBE_EXITS)
			return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	long long us = (long long)(b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000;
	return (long)(us / PROBE_EXITS);
}

/* The timing probe in a child, killed after PROBE_TIMEOUT_S: µs per exit or -1. */
static long kp_probe_child(int kvm)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		alarm(PROBE_TIMEOUT_S);
		long us = kp_time_exits(kvm);
		_exit(write(p[1], &us, sizeof us) == sizeof us ? 0 : 1);
	}
	close(p[1]);
	long us = -1;
	if (read(p[0], &us, sizeof us) != sizeof us)
		us = -1;
	close(p[0]);
	waitpid(pid, NULL, 0);
	return us;
}

bool kvmprobe_run(char *why, size_t len)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		snprintf(why, len, "/dev/kvm: %s", strerror(errno));
		return false;
	}
	bool ok = false;
	int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION) {
		snprintf(why, len, "/dev/kvm answers API version %d, not %d", api,
			 KVM_API_VERSION);
	} else if (!kp_cpu_has_virt()) {
		snprintf(why, len,
			 "/dev/kvm is there but the CPU shows no vmx/svm: a paravirtual KVM "
			 "of the host's own hypervisor, slower than TCG for a full kernel");
	} else {
		long us = kp_probe_child(kvm);
		if (us < 0)
			snprintf(why, len, "a test guest did not run on /dev/kvm within %d s",
				 PROBE_TIMEOUT_S);
		else if (us > PROBE_MAX_EXIT_US)
			snprintf(why, len, "a VM exit takes %ld us on /dev/kvm (over %d us)", us,
				 PROBE_MAX_EXIT_US);
		else {
			snprintf(why, len, "a VM exit takes %ld us on /dev/kvm", us);
			ok = true;
		}
	}
	close(kvm);
	return ok;
}
