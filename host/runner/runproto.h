/*
 * runproto: the wire between cubicled's runner (runner.c) and a language
 * supervisor (cubicle-pyrun, the JavaScript worker).
 *
 * cubicled makes a socketpair per run and passes one end to the supervisor
 * (SCM_RIGHTS over the supervisor's control socket, fd 3, SOCK_SEQPACKET:
 * one message, one run). On that connection it writes a run_req and the
 * code and stdin bytes, and reads back one run_resp and the stdout, stderr
 * and message bytes; then the connection is closed. Host byte order: both
 * ends are on the same machine. The supervisor trusts cubicled (its parent)
 * but checks every length.
 */
#ifndef CUBICLE_RUNPROTO_H
#define CUBICLE_RUNPROTO_H

#include <stdint.h>

#define RUN_REQ_MAGIC  0x31514552u /* "REQ1" */
#define RUN_RESP_MAGIC 0x31505352u /* "RSP1" */

#define RUN_CODE_MAX  (10u << 10) /* bytes; cubicled answers 413 past it */
#define RUN_STDIN_MAX (1u << 20)  /* bytes */
#define RUN_MSG_MAX   4096u	  /* error message bytes */

struct run_req {
	uint32_t magic;
	uint32_t code_len, stdin_len;
	uint32_t cpu_ms;  /* CPU time the code may use */
	uint32_t wall_ms; /* wall time from its start */
	uint32_t mem_mb;  /* memory on top of the zygote's */
	uint32_t out_max; /* stdout + stderr bytes kept; more ends the run */
};

enum run_error {
	RUN_OK = 0,
	RUN_EXCEPTION,	  /* "exception": the code raised (or crashed) */
	RUN_CPU_LIMIT,	  /* "cpu_limit" */
	RUN_MEMORY_LIMIT, /* "memory_limit" */
	RUN_TIMEOUT,	  /* "timeout": wall time */
	RUN_OUTPUT_LIMIT, /* "output_limit": the output is cut, truncated */
	RUN_INTERNAL,	  /* the sandbox could not be made: cubicled answers 503 */
};

struct run_resp {
	uint32_t magic;
	int32_t exit_code;
	uint32_t error; /* enum run_error */
	uint32_t cpu_ms, wall_ms, memory_kb;
	uint32_t truncated;
	uint32_t stdout_len, stderr_len, msg_len;
};

#endif
