/*
 * child.h: runs a test's body in a forked child, for what changes the
 * process for good (namespaces, mounts, seccomp filters). The child's exit
 * code is its verdict: 0 passed, 77 cannot run here (the test is skipped),
 * anything else names the step that failed. Include after cmocka.h.
 */
#ifndef CUBICLE_TEST_CHILD_H
#define CUBICLE_TEST_CHILD_H

#include <sys/wait.h>
#include <unistd.h>

static inline void child_check(int (*body)(void))
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(body());
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		skip();
	assert_int_equal(WEXITSTATUS(status), 0);
}

#endif
