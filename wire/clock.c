#include "clock.h"

#include <errno.h>
#include <time.h>

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_now_ms(void)
{
	return clock_ns(CLOCK_MONOTONIC) / 1000000;
}

int64_t clock_now_us(void)
{
	return clock_ns(CLOCK_MONOTONIC) / 1000;
}

int64_t clock_wall_ms(void)
{
	return clock_ns(CLOCK_REALTIME) / 1000000;
}

struct timespec clock_deadline(clockid_t id, int64_t ms)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

void clock_sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	return; /* the fuzz harnesses (tests/fuzz) do not wait out an agent's pauses */
#endif
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}
