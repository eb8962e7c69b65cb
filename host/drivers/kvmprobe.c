/*
 * kvmprobe: see kvmprobe.h.
 */
#include "kvmprobe.h"
#include "clock.h"

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

#define PROBE_EXITS	  2000
#define PROBE_SEGMENTS	  9 /* 64 KiB each */
#define PROBE_MAX_PAGE_US 50
#define PROBE_MAX_EXIT_US 50
#define PROBE_TIMEOUT_S	  2

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
 * The guest, 1 MiB of RAM, code at 0x1000 in real mode: for es = 0x1000,
 * 0x2000 .. 0x9000 { xor di,di; mov cx,0x8000; rep stosw } (576 KiB, 144
 * pages, each a first touch the host must map), then mov cx,PROBE_EXITS;
 * again: out 0x10,al; loop again; hlt. out[0] = µs per page, out[1] = µs
 * per exit; -1 on failure.
 */
static int kp_time(int kvm, long out[2])
{
	size_t size = 1 << 20;
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	unsigned char *mem =
	    mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (vm < 0 || mem == MAP_FAILED)
		return -1;
	unsigned char *p = mem + 0x1000;
	for (int seg = 1; seg <= PROBE_SEGMENTS; seg++) {
		const unsigned char fill[] = {0xb8, 0x00, (unsigned char)(seg << 4), /* mov ax */
					      0x8e, 0xc0,			     /* mov es,ax */
					      0x31, 0xff,			     /* xor di,di */
					      0xb9, 0x00, 0x80,			     /* mov cx */
					      0xf3, 0xab};			     /* rep stosw */
		memcpy(p, fill, sizeof fill);
		p += sizeof fill;
	}
	/* mov cx,PROBE_EXITS; out 0x10,al; loop (back to the out); hlt */
	const unsigned char tail[] = {
	    0xb9, PROBE_EXITS & 0xff, PROBE_EXITS >> 8, 0xe6, 0x10, 0xe2, 0xfc, 0xf4};
	memcpy(p, tail, sizeof tail);
	struct kvm_userspace_memory_region r = {.slot = 0,
						.guest_phys_addr = 0,
						.memory_size = size,
						.userspace_addr = (unsigned long)mem};
	int cpu = -1;
	long msize = -1;
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &r) < 0 ||
	    (cpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0 ||
	    (msize = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0)) <= 0)
		return -1;
	struct kvm_run *run = mmap(NULL, (size_t)msize, PROT_READ | PROT_WRITE, MAP_SHARED, cpu, 0);
	struct kvm_sregs s;
	if (run == MAP_FAILED || ioctl(cpu, KVM_GET_SREGS, &s) < 0)
		return -1;
	s.cs.base = 0;
	s.cs.selector = 0;
	struct kvm_regs regs = {.rip = 0x1000, .rflags = 2};
	if (ioctl(cpu, KVM_SET_SREGS, &s) < 0 || ioctl(cpu, KVM_SET_REGS, &regs) < 0)
		return -1;
	int64_t t = clock_now_us();
	/* The first exit is the first out: the pages are all written by then. */
	if (ioctl(cpu, KVM_RUN, 0) < 0 || run->exit_reason != KVM_EXIT_IO)
		return -1;
	out[0] = (long)((clock_now_us() - t) / (PROBE_SEGMENTS * 16));
	t = clock_now_us();
	for (int exits = 1;; exits++) {
		if (ioctl(cpu, KVM_RUN, 0) < 0)
			return -1;
		if (run->exit_reason == KVM_EXIT_HLT)
			break;
		if (run->exit_reason != KVM_EXIT_IO || exits > PROBE_EXITS)
			return -1;
	}
	out[1] = (long)((clock_now_us() - t) / PROBE_EXITS);
	return 0;
}

/* kp_time in a child, killed after PROBE_TIMEOUT_S. */
static int kp_probe_child(int kvm, long out[2])
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
		long us[2];
		_exit(kp_time(kvm, us) == 0 && write(p[1], us, sizeof us) == sizeof us ? 0 : 1);
	}
	close(p[1]);
	int rc = read(p[0], out, 2 * sizeof(long)) == 2 * sizeof(long) ? 0 : -1;
	close(p[0]);
	waitpid(pid, NULL, 0);
	return rc;
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
		snprintf(why, len, "/dev/kvm answers API version %d, not %d", api, KVM_API_VERSION);
	} else if (!kp_cpu_has_virt()) {
		snprintf(why, len,
			 "/dev/kvm is there but the CPU shows no vmx/svm: a paravirtual KVM "
			 "of the host's own hypervisor, slower than TCG for a full kernel");
	} else {
		long us[2];
		if (kp_probe_child(kvm, us) < 0) {
			snprintf(why, len, "a test guest did not run on /dev/kvm within %d s",
				 PROBE_TIMEOUT_S);
		} else {
			ok = us[0] <= PROBE_MAX_PAGE_US && us[1] <= PROBE_MAX_EXIT_US;
			snprintf(why, len,
				 "a test guest on /dev/kvm: %ld us per first touch of a page "
				 "(limit %d), %ld us per exit to user space (limit %d)",
				 us[0], PROBE_MAX_PAGE_US, us[1], PROBE_MAX_EXIT_US);
		}
	}
	close(kvm);
	return ok;
}
