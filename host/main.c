/*
 * cubicled: the host service.
 *
 *   cubicled --listen HOST:PORT --state-dir DIR [--images DIR] [options]
 *
 * Opens the store in the state directory, recovers every computer it had
 * (core_open), and serves the REST API until SIGTERM. The admin key comes
 * from $CUBICLE_ADMIN_KEY, else from DIR/admin.key (generated, mode 0600).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "core.h"
#include "store.h"

static struct api *main_api;

static void main_on_signal(int sig)
{
	(void)sig;
	if (main_api)
		api_stop(main_api);
}

static void main_usage(FILE *to)
{
	fputs("usage: cubicled --state-dir DIR [options]\n"
	      "\n"
	      "  --listen HOST:PORT        where to serve the API (default 127.0.0.1:8080;\n"
	      "                            port 0 = any free port)\n"
	      "  --state-dir DIR           the database, computers' disks, sessions, keys\n"
	      "  --images DIR              built guest images (default: ../images beside the\n"
	      "                            binary, i.e. build/images)\n"
	      "  --unit-rate NANODOLLARS   per second for an xs sandbox (default 15000)\n"
	      "  --stopped-rate NANODOLLARS  per second while stopped (default 0)\n"
	      "  --max-running N           running computers per workspace (default 10)\n"
	      "  --idle-timeout S          default idle timeout (default 600)\n"
	      "  --ready-timeout S         boot to ready before error (default 120)\n"
	      "  --warm-pool SIZE=N,...    desktops kept started per size, e.g. small=1\n"
	      "  --web DIR                 the built embed page (default: ../webclient beside\n"
	      "                            the binary, i.e. build/webclient)\n"
	      "  --frame-ancestors SRC     CSP frame-ancestors of the embed page (default 'self')\n"
	      "  --stream-ttl-max S        longest stream token lifetime (default 600)\n"
	      "  --stream-max S            longest an open stream lives (default 3600)\n"
	      "\n"
	      "The admin key is $CUBICLE_ADMIN_KEY, else DIR/admin.key (created if missing).\n",
	      to);
}

static long long main_number(const char *s, const char *flag, long long lo, long long hi)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "cubicled: %s takes a number in [%lld, %lld], not '%s'\n", flag, lo,
			hi, s);
		exit(2);
	}
	return v;
}

/* The key that signs stream tokens: DIR/stream.key, 32 random bytes, 0600. */
static int main_stream_key(const char *state_dir, unsigned char key[32])
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/stream.key", state_dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, key, 32);
		close(fd);
		if (n == 32)
			return 0;
	}
	fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, key, 32) != 32) {
		fprintf(stderr, "cubicled: no randomness for the stream key\n");
		return -1;
	}
	close(fd);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, key, 32) != 32) {
		fprintf(stderr, "cubicled: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

/* "small=1,medium=0": desktops kept warm per size. */
static int main_warm_pool(const char *spec, struct core_config *cfg)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", spec);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			goto bad;
		*eq = 0;
		int n = (int)main_number(eq + 1, "--warm-pool", 0, 100);
		if (strcmp(tok, "small") == 0)
			cfg->warm_small = n;
		else if (strcmp(tok, "medium") == 0)
			cfg->warm_medium = n;
		else if (strcmp(tok, "large") == 0)
			cfg->warm_large = n;
		else
			goto bad;
	}
	return 0;
bad:
	fprintf(stderr, "cubicled: --warm-pool takes small=N,medium=N,large=N, not '%s'\n", spec);
	return -1;
}

/* $CUBICLE_ADMIN_KEY, or the state dir's admin.key, created on first run. */
static char *main_admin_key(const char *state_dir)
{
	const char *env = getenv("CUBICLE_ADMIN_KEY");
	if (env && *env) {
		if (strlen(env) < 16) {
			fprintf(stderr,
				"cubicled: CUBICLE_ADMIN_KEY is shorter than 16 characters\n");
			return NULL;
		}
		return strdup(env);
	}
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/admin.key", state_dir);
	char buf[128] = "";
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = 0;
		fclose(f);
		buf[strcspn(buf, "\r\n")] = 0;
		if (strlen(buf) >= 16)
			return strdup(buf);
	}
	unsigned char r[24];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
		fprintf(stderr, "cubicled: no randomness for the admin key\n");
		return NULL;
	}
	close(fd);
	snprintf(buf, sizeof buf, "ck_admin_");
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(buf + 9 + 2 * i, 3, "%02x", r[i]);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, strlen(buf)) < 0 || write(fd, "\n", 1) < 0) {
		fprintf(stderr, "cubicled: cannot write %s: %s\n", path, strerror(errno));
		return NULL;
	}
	close(fd);
	return strdup(buf);
}

int main(int argc, char **argv)
{
	const char *listen = "127.0.0.1:8080", *state_dir = NULL, *images = NULL, *web = NULL;
	const char *frame_ancestors = "'self'";
	int stream_ttl_max = 600, stream_max = 3600;
	struct core_config cfg = {
	    .rates = {.unit_nanodollars_per_s = 15000, .stopped_nanodollars_per_s = 0},
	    .default_idle_s = 600,
	    .default_max_running = 10,
	    .ready_timeout_s = 120,
	};
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"images", required_argument, NULL, 'i'},
	    {"unit-rate", required_argument, NULL, 'u'},
	    {"stopped-rate", required_argument, NULL, 'S'},
	    {"max-running", required_argument, NULL, 'm'},
	    {"idle-timeout", required_argument, NULL, 't'},
	    {"ready-timeout", required_argument, NULL, 'r'},
	    {"warm-pool", required_argument, NULL, 'w'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			listen = optarg;
			break;
		case 's':
			state_dir = optarg;
			break;
		case 'i':
			images = optarg;
			break;
		case 'u':
			cfg.rates.unit_nanodollars_per_s =
			    main_number(optarg, "--unit-rate", 0, 1000000000);
			break;
		case 'S':
			cfg.rates.stopped_nanodollars_per_s =
			    main_number(optarg, "--stopped-rate", 0, 1000000000);
			break;
		case 'm':
			cfg.default_max_running =
			    (int)main_number(optarg, "--max-running", 1, 100000);
			break;
		case 't':
			cfg.default_idle_s =
			    (int)main_number(optarg, "--idle-timeout", 1, 7 * 86400);
			break;
		case 'r':
			cfg.ready_timeout_s = (int)main_number(optarg, "--ready-timeout", 1, 3600);
			break;
		case 'w':
			if (main_warm_pool(optarg, &cfg) < 0)
				return 2;
			break;
		case 'W':
			web = optarg;
			break;
		case 'F':
			frame_ancestors = optarg;
			break;
		case 'T':
			stream_ttl_max = (int)main_number(optarg, "--stream-ttl-max", 1, 86400);
			break;
		case 'M':
			stream_max = (int)main_number(optarg, "--stream-max", 1, 7 * 86400);
			break;
		case 'V':
			printf("cubicled %s\n", CUBICLE_VERSION);
			return 0;
		case 'h':
			main_usage(stdout);
			return 0;
		default:
			main_usage(stderr);
			return 2;
		}
	}
	if (!state_dir || optind != argc) {
		main_usage(stderr);
		return 2;
	}
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "cubicled: cannot create %s: %s\n", state_dir, strerror(errno));
		return 1;
	}
	char state_abs[PATH_MAX], images_abs[PATH_MAX + 16], spool[PATH_MAX + 16],
	    db[PATH_MAX + 16];
	if (!realpath(state_dir, state_abs)) {
		fprintf(stderr, "cubicled: %s: %s\n", state_dir, strerror(errno));
		return 1;
	}
	if (!images) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		self[n > 0 ? n : 0] = 0;
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = 0;
		snprintf(images_abs, sizeof images_abs, "%s/../images", self);
	} else {
		snprintf(images_abs, sizeof images_abs, "%s", images);
	}
	char images_real[PATH_MAX + 16];
	if (!realpath(images_abs, images_real))
		snprintf(images_real, sizeof images_real, "%s", images_abs);
	cfg.state_dir = state_abs;
	cfg.images_dir = images_real;
	char *admin = main_admin_key(state_abs);
	if (!admin)
		return 1;

	signal(SIGPIPE, SIG_IGN);
	/* A computer's init is detached from us so it survives a crash; as a
	 * subreaper we still inherit it when its helper exits, and the driver
	 * reaps it on stop (the host's init may not reap at all). */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	struct err e = {0};
	snprintf(db, sizeof db, "%s/cubicle.db", state_abs);
	struct store *store = store_open(db, &e);
	if (!store) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	struct core *core = core_open(&cfg, store, &e);
	if (!core) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	snprintf(spool, sizeof spool, "%s/spool", state_abs);
	unsigned char stream_key[32];
	if (main_stream_key(state_abs, stream_key) < 0)
		return 1;
	char web_dir[PATH_MAX + 16];
	if (web) {
		snprintf(web_dir, sizeof web_dir, "%s", web);
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		self[n > 0 ? n : 0] = 0;
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = 0;
		snprintf(web_dir, sizeof web_dir, "%s/../webclient", self);
	}
	struct api_opts ao = {
	    .listen = listen,
	    .admin_key = admin,
	    .spool_dir = spool,
	    .stream_key = stream_key,
	    .web_dir = web_dir,
	    .frame_ancestors = frame_ancestors,
	    .stream_ttl_max_s = stream_ttl_max,
	    .stream_max_s = stream_max,
	};
	main_api = api_create(core, store, &ao, &e);
	if (!main_api) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = main_on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("cubicled: listening on %s (images %s, state %s)\n", api_address(main_api),
	       images_real, state_abs);
	fflush(stdout);
	api_run(main_api);
	api_destroy(main_api);
	core_close(core);
	store_close(store);
	free(admin);
	return 0;
}
