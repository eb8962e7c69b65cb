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
#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/sha.h>

#include "api.h"
#include "ident.h"
#include "log.h"
#include "token.h"
#include "core.h"
#include "guest-net.h"
#include "nodeauth.h"
#include "guest-setup.h"
#include "store.h"

/* What SIGTERM/SIGINT stop; NULL once the server is being torn down, so a
 * second signal (a supervisor that signals the whole group, an impatient
 * Ctrl-C) cannot reach a server that is being freed. */
static struct api *volatile main_api;

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
	      "  --database URI            a shared PostgreSQL database (postgresql://...)\n"
	      "                            instead of DIR/cubicle.db (host/store/README.md);\n"
	      "                            or $CUBICLE_DATABASE, which keeps a password out\n"
	      "                            of ps\n"
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
	      "  --streams-per-computer N  open streams one computer may have (default 8)\n"
	      "  --preview-listen HOST:PORT  where previews and CDP are relayed from (default\n"
	      "                            --listen's host and port + 1; off = none)\n"
	      "  --preview-url URL         how browsers reach it: http(s)://DOMAIN[:PORT];\n"
	      "                            previews are PORT-ID.DOMAIN (default\n"
	      "                            http://localhost:<its port>)\n"
	      "  --preview-ttl-max S       longest preview or CDP token lifetime (default 86400)\n"
	      "  --previews-per-computer N  connections open through previews and CDP per\n"
	      "                            computer (default 32)\n"
	      "  --preview-idle S          such a connection idle this long ends (default 300)\n"
	      "  --public-previews         workspace keys may make public previews (no token)\n"
	      "  --mcp-origins LIST        browser Origins (comma-separated) allowed on /mcp\n"
	      "                            besides cubicled's own (default none)\n"
	      "  --run-cpu-ms MS           CPU time of a code run (default 100)\n"
	      "  --run-wall-ms MS          wall time of a code run (default 30000)\n"
	      "  --run-memory-mb MB        memory of a code run (default 128)\n"
	      "  --run-output-max BYTES    stdout + stderr kept per run (default 1048576)\n"
	      "  --run-code-max BYTES      code per run, at most 10240 (default 10240)\n"
	      "  --run-concurrency N       runs at once; more wait (default 32)\n"
	      "  --run-pool N              sandboxes kept ready per language (default 8)\n"
	      "  --run-uid UID             uid and gid the runs run as (default 65534)\n"
	      "  --max-envd-answer-mb N    an envd answer kept in memory (default 64)\n"
	      "  --max-envd-answers-mb N   all envd answers being received at once (default 512)\n"
	      "  --envd-timeout S          an action's deadline in envd (default 120)\n"
	      "  --spool-max-workspace-mb N  spooled file transfers per workspace (default 4096)\n"
	      "  --spool-max-mb N          spooled file transfers in all (default 16384)\n"
	      "  --spool-min-free-mb N     free disk the spool leaves (default 1024)\n"
	      "  --max-stopped-per-workspace N  stopped computers per workspace (default 20)\n"
	      "  --session-quota-mb N      a workspace's session storage (default 10240;\n"
	      "                            0 = unlimited)\n"
	      "  --max-requests N          requests running at once, all callers (default 256)\n"
	      "  --max-requests-per-workspace N  in flight per workspace (default 32; the\n"
	      "                            requests without a key share one such budget)\n"
	      "  --max-waits-per-workspace N  ?wait= requests in flight per workspace\n"
	      "                            (default 16)\n"
	      "  --max-conns-per-addr N    open connections per client address (default 64)\n"
	      "  --max-body BYTES          JSON body of a request with a key (default 1048576)\n"
	      "  --max-body-anonymous BYTES  body of a request without a key (default 4096)\n"
	      "  --header-timeout S        request headers complete within (default 10)\n"
	      "  --body-timeout S          a body arrives within S (default 30), plus 1 s\n"
	      "  --body-min-rate BYTES     per this many bytes received (default 16384)\n"
	      "  --recording-fps N         frames a second a recording takes at most (default 10)\n"
	      "  --recording-max-s S       the longest recording (default 3600)\n"
	      "  --recording-max-mb N      the largest recording file (default 1024)\n"
	      "  --recordings-per-computer N  recordings of one computer at once (default 1)\n"
	      "  --max-recordings N        recordings at once on this host (default 4)\n"
	      "  --recording-keep-days N   a kept recording is deleted N days after it\n"
	      "                            stopped (default 30)\n"
	      "  --egress-allow CIDR,...   IPv4 prefixes guests may reach although the\n"
	      "                            default egress policy denies them (private,\n"
	      "                            CGNAT...: host/README.md); never the host's own\n"
	      "  --egress-deny CIDR,...    IPv4 prefixes guests may not reach, besides the\n"
	      "                            defaults (beats any allow)\n"
	      "  --templates DIR           the built-in templates' recipes (default: ../templates\n"
	      "                            beside the binary, i.e. rootfs/templates)\n"
	      "  --template-cache DIR      where template layers and images go (default: the\n"
	      "                            base images' cache, beside them)\n"
	      "  --max-template-builds N   template builds at once (default 2; more: 429)\n"
	      "  --max-templates-per-workspace N  (default 20)\n"
	      "  --template-max-mb N       what a template may add to its base (default 4096)\n"
	      "  --template-build-timeout S  a template's whole build (default 1800)\n"
	      "  --template-cache-keep N   unused template layers and images kept (default 16)\n"
	      "  --build-templates         build the built-in templates into the cache and exit\n"
	      "                            (make images; no --state-dir needed)\n"
	      "  --metrics-open            serve GET /metrics without a key (it names\n"
	      "                            workspaces; default: the admin key only)\n"
	      "  --log-format text|json    the log on stderr: text (default), or one JSON\n"
	      "                            object per line\n"
	      "  --guest-ca-certs DIR      CA certificates (*.crt, PEM) every guest trusts\n"
	      "                            besides Debian's (default\n"
	      "                            /usr/local/share/ca-certificates; none = none)\n"
	      "  --pip-index-url URL       the package index pip uses in guests (default PyPI)\n"
	      "  --npm-registry URL        the registry npm uses in guests (default npm's)\n"
	      "  --guest-sizes on|off      whether containers show their size in nproc, /proc\n"
	      "                            and uptime (default on; off: the host's)\n"
	      "\n"
	      "A cluster of hosts behind one API (docs/cluster.md):\n"
	      "  --cluster-etcd URL,...    join a cluster: etcd's client URLs\n"
	      "                            (http://HOST:2379,...); needs --database\n"
	      "                            (or $CUBICLE_DATABASE)\n"
	      "  --host-id ID              this host's id (default: its hostname)\n"
	      "  --advertise IP:PORT       where the other hosts call this one (default:\n"
	      "                            --listen's, which must then be an IP address)\n"
	      "  --cluster-ttl S           the membership lease: a host silent this long\n"
	      "                            is dead (default 5)\n"
	      "  --cluster-secret-file F   the secret every host of the cluster shares\n"
	      "                            (else $CUBICLE_CLUSTER_SECRET)\n"
	      "  --sessions-dir DIR        sessions on a path every host mounts (default:\n"
	      "                            each host's own, in its state directory)\n"
	      "  --capacity vcpus=N,memory_mb=N,disk_mb=N,cpu_overcommit_pct=N\n"
	      "                            what this host offers to placement (default:\n"
	      "                            the machine's; vCPUs overcommitted 400%)\n"
	      "  --config FILE             flags from a file, one 'name = value' a line\n"
	      "                            (the command line's win)\n"
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

/*
 * A secret kept in the state directory: the first line of DIR/name, or
 * prefix + 48 random hex digits written there (mode 0600) on first run.
 * Returns a malloc'd string, or NULL after saying why.
 */
static char *main_state_secret(const char *state_dir, const char *name, const char *prefix)
{
	char path[PATH_MAX + 16], buf[128] = "";
	snprintf(path, sizeof path, "%s/%s", state_dir, name);
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = 0;
		fclose(f);
		buf[strcspn(buf, "\r\n")] = 0;
		if (strlen(buf) >= strlen(prefix) + 48)
			return strdup(buf);
	}
	struct err e = {0};
	size_t plen = strlen(prefix);
	memcpy(buf, prefix, plen);
	if (ident_random_hex(buf + plen, 24, &e) < 0) {
		fprintf(stderr, "cubicled: %s: %s\n", name, e.message);
		return NULL;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", buf) < 0) {
		fprintf(stderr, "cubicled: cannot write %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	close(fd);
	return strdup(buf);
}

/* $CUBICLE_DATABASE (malloc'd, wiped from the environment), else NULL: the
 * flag's or the state dir's database. A password on the command line is
 * readable by every local user (ps): say so. */
static bool main_uri_has_password(const char *uri)
{
	if (strstr(uri, "password="))
		return true;
	const char *auth = strstr(uri, "://");
	if (!auth)
		return false;
	auth += 3;
	size_t n = strcspn(auth, "/?");
	const char *at = memchr(auth, '@', n);
	return at && memchr(auth, ':', (size_t)(at - auth));
}

/* A secret from the environment, copied, then gone from it and from its
 * bytes in our memory (/proc/PID/environ of cubicled and of every process
 * forked from it shows them): no child inherits it. NULL if unset or empty. */
static char *main_env_take(const char *name)
{
	const char *env = getenv(name);
	if (!env || !*env)
		return NULL;
	char *v = strdup(env);
	explicit_bzero((char *)env, strlen(env));
	unsetenv(name);
	return v;
}

static char *main_database(const char *flag)
{
	if (flag && main_uri_has_password(flag))
		fprintf(stderr, "cubicled: --database has a password in it, which every local "
				"user can read (ps): use $CUBICLE_DATABASE or a .pgpass file\n");
	return main_env_take("CUBICLE_DATABASE");
}

/* $CUBICLE_ADMIN_KEY, or the state dir's admin.key, created on first run. */
static char *main_admin_key(const char *state_dir)
{
	char *key = main_env_take("CUBICLE_ADMIN_KEY");
	if (key && strlen(key) < 16) {
		fprintf(stderr, "cubicled: CUBICLE_ADMIN_KEY is shorter than 16 characters\n");
		explicit_bzero(key, strlen(key));
		free(key);
		return NULL;
	}
	return key ? key : main_state_secret(state_dir, "admin.key", "ck_admin_");
}

/*
 * --config FILE: the file's flags go before the command line's (which win,
 * being parsed later). One "name = value" (or "name value", or a bare
 * "name") a line, the name a long flag without its dashes; '#' starts a
 * comment. *argv_out is malloc'd (its strings too: they live as long as
 * the process, kept in main_config_argv so LeakSanitizer sees them held).
 */
static char **main_config_argv;

static int main_config_file(int argc, char **argv, int *argc_out, char ***argv_out)
{
	const char *path = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			path = argv[i + 1];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			path = argv[i] + 9;
	}
	*argc_out = argc;
	*argv_out = argv;
	if (!path)
		return 0;
	FILE *f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "cubicled: --config %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = (size_t)argc + 16, n = 0;
	char **out = calloc(cap + 1, sizeof *out);
	if (!out) {
		fclose(f);
		return -1;
	}
	out[n++] = argv[0];
	char line[4096];
	int lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *p = line;
		p[strcspn(p, "#\r\n")] = 0;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			continue;
		char *name = p;
		size_t nl = strcspn(p, " \t=");
		char *v = p + nl;
		bool has_value = *v != 0;
		if (*v)
			*v++ = 0;
		while (*v == ' ' || *v == '\t' || *v == '=')
			v++;
		char *end = v + strlen(v);
		while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = 0;
		if (strcmp(name, "config") == 0 || strncmp(name, "-", 1) == 0 || nl == 0) {
			fprintf(stderr, "cubicled: %s:%d: '%s' is not a flag name here\n", path,
				lineno, name);
			fclose(f);
			return -1;
		}
		if (n + 2 >= cap) {
			cap *= 2;
			char **grown = realloc(out, (cap + 1) * sizeof *out);
			if (!grown) {
				fclose(f);
				return -1;
			}
			out = grown;
		}
		char *flag = NULL;
		if (asprintf(&flag, "--%s", name) < 0) {
			fclose(f);
			return -1;
		}
		out[n++] = flag;
		if (has_value && *v)
			out[n++] = strdup(v);
	}
	fclose(f);
	if (n + (size_t)argc >= cap) {
		char **grown = realloc(out, (n + (size_t)argc + 1) * sizeof *out);
		if (!grown)
			return -1;
		out = grown;
	}
	for (int i = 1; i < argc; i++)
		out[n++] = argv[i];
	out[n] = NULL;
	*argc_out = (int)n;
	*argv_out = out;
	main_config_argv = out;
	return 0;
}

/* A secret from a file (its first line) or an environment variable (read,
 * then wiped from the environment like the admin key); NULL if neither. */
static char *main_secret_from(const char *file, const char *env_name)
{
	if (file) {
		FILE *f = fopen(file, "re");
		char buf[512] = "";
		if (!f) {
			fprintf(stderr, "cubicled: %s: %s\n", file, strerror(errno));
			return NULL;
		}
		if (!fgets(buf, sizeof buf, f))
			buf[0] = 0;
		fclose(f);
		buf[strcspn(buf, "\r\n")] = 0;
		char *s = strdup(buf);
		explicit_bzero(buf, sizeof buf);
		return s;
	}
	return main_env_take(env_name);
}

/* "vcpus=N,memory_mb=N,disk_mb=N": what this host offers a cluster. */
static int main_capacity(const char *spec, struct core_cluster_config *cl)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", spec);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			goto bad;
		*eq = 0;
		if (strcmp(tok, "vcpus") == 0)
			cl->vcpus = (int)main_number(eq + 1, "--capacity vcpus", 1, 100000);
		else if (strcmp(tok, "memory_mb") == 0)
			cl->memory_mb = main_number(eq + 1, "--capacity memory_mb", 64, 1ll << 40);
		else if (strcmp(tok, "disk_mb") == 0)
			cl->disk_mb = main_number(eq + 1, "--capacity disk_mb", 64, 1ll << 40);
		else if (strcmp(tok, "cpu_overcommit_pct") == 0)
			cl->cpu_overcommit_pct =
			    (int)main_number(eq + 1, "--capacity cpu_overcommit_pct", 100, 10000);
		else
			goto bad;
	}
	return 0;
bad:
	fprintf(stderr,
		"cubicled: --capacity takes vcpus=N,memory_mb=N,disk_mb=N,cpu_overcommit_pct=N, "
		"not '%s'\n",
		spec);
	return -1;
}

/* The host id a cluster knows this host by: --host-id, else the hostname
 * (its characters outside [A-Za-z0-9_-] made '-'). */
static void main_host_id(const char *given, char out[64])
{
	if (given) {
		snprintf(out, 64, "%s", given);
		return;
	}
	char hn[256] = "";
	gethostname(hn, sizeof hn - 1);
	snprintf(out, 64, "%.63s", hn[0] ? hn : "host");
	for (char *p = out; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			*p = '-';
}

int main(int argc, char **argv)
{
	if (main_config_file(argc, argv, &argc, &argv) < 0)
		return 2;
	const char *database = NULL, *cluster_etcd = NULL, *host_id_given = NULL, *advertise = NULL,
		   *secret_file = NULL, *sessions_dir = NULL;
	int cluster_ttl = 5;
	struct core_cluster_config cluster = {0};
	const char *listen = "127.0.0.1:8080", *state_dir = NULL, *images = NULL, *web = NULL,
		   *preview_listen = NULL;
	const char *frame_ancestors = "'self'", *mcp_origins = NULL;
	int stream_ttl_max = 600, stream_max = 3600, streams_per_computer = 8;
	struct runner_config rc = {0};
	struct envd_limits envd_limits = {0};
	bool session_quota_set = false, build_templates = false;
	struct api_opts ao = {
	    .max_requests = 256,
	    .max_requests_per_workspace = 32,
	    .max_waits_per_workspace = 16,
	    .max_conns_per_addr = 64,
	    .max_body = 1u << 20,
	    .max_body_anonymous = 4096,
	    .header_timeout_s = 10,
	    .body_timeout_s = 30,
	    .body_min_rate = 16384,
	};
	static struct guest_net_list egress_allow, egress_deny;
	const char *guest_ca_dir = GUEST_CA_DEFAULT_DIR, *pip_index_url = NULL,
		   *npm_registry = NULL;
	struct core_config cfg = {
	    .rates = {.unit_nanodollars_per_s = 15000, .stopped_nanodollars_per_s = 0},
	    .default_idle_s = 600,
	    .default_max_running = 10,
	    .ready_timeout_s = 120,
	    .egress_allow = &egress_allow,
	    .egress_deny = &egress_deny,
	    .templates = {.cache_keep = -1},
	};
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"database", required_argument, NULL, 0x300},
	    {"images", required_argument, NULL, 'i'},
	    {"unit-rate", required_argument, NULL, 'u'},
	    {"stopped-rate", required_argument, NULL, 'S'},
	    {"max-running", required_argument, NULL, 'm'},
	    {"idle-timeout", required_argument, NULL, 't'},
	    {"ready-timeout", required_argument, NULL, 'r'},
	    {"warm-pool", required_argument, NULL, 'w'},
	    {"web", required_argument, NULL, 'W'},
	    {"frame-ancestors", required_argument, NULL, 'F'},
	    {"stream-ttl-max", required_argument, NULL, 'T'},
	    {"stream-max", required_argument, NULL, 'M'},
	    {"streams-per-computer", required_argument, NULL, 0x5301},
	    {"mcp-origins", required_argument, NULL, 'O'},
	    {"preview-listen", required_argument, NULL, 0x5401},
	    {"preview-url", required_argument, NULL, 0x5402},
	    {"preview-ttl-max", required_argument, NULL, 0x5403},
	    {"previews-per-computer", required_argument, NULL, 0x5404},
	    {"preview-idle", required_argument, NULL, 0x5405},
	    {"public-previews", no_argument, NULL, 0x5406},
	    /* the code runner (docs/code-runner.md) */
	    {"run-cpu-ms", required_argument, NULL, 1001},
	    {"run-wall-ms", required_argument, NULL, 1002},
	    {"run-memory-mb", required_argument, NULL, 1003},
	    {"run-output-max", required_argument, NULL, 1004},
	    {"run-code-max", required_argument, NULL, 1005},
	    {"run-concurrency", required_argument, NULL, 1006},
	    {"run-pool", required_argument, NULL, 1007},
	    {"run-uid", required_argument, NULL, 1008},
	    {"max-envd-answer-mb", required_argument, NULL, 0x100},
	    {"envd-timeout", required_argument, NULL, 0x101},
	    {"spool-max-workspace-mb", required_argument, NULL, 0x102},
	    {"spool-max-mb", required_argument, NULL, 0x103},
	    {"spool-min-free-mb", required_argument, NULL, 0x104},
	    {"max-stopped-per-workspace", required_argument, NULL, 0x105},
	    {"session-quota-mb", required_argument, NULL, 0x106},
	    {"max-envd-answers-mb", required_argument, NULL, 0x107},
	    {"max-requests", required_argument, NULL, 0x200},
	    {"max-requests-per-workspace", required_argument, NULL, 0x201},
	    {"max-waits-per-workspace", required_argument, NULL, 0x202},
	    {"max-conns-per-addr", required_argument, NULL, 0x203},
	    {"max-body", required_argument, NULL, 0x204},
	    {"max-body-anonymous", required_argument, NULL, 0x205},
	    {"header-timeout", required_argument, NULL, 0x206},
	    {"body-timeout", required_argument, NULL, 0x207},
	    {"body-min-rate", required_argument, NULL, 0x208},
	    {"templates", required_argument, NULL, 0x7100},
	    {"template-cache", required_argument, NULL, 0x7101},
	    {"max-template-builds", required_argument, NULL, 0x7102},
	    {"max-templates-per-workspace", required_argument, NULL, 0x7103},
	    {"template-max-mb", required_argument, NULL, 0x7104},
	    {"template-build-timeout", required_argument, NULL, 0x7105},
	    {"template-cache-keep", required_argument, NULL, 0x7106},
	    {"build-templates", no_argument, NULL, 0x7107},
	    {"recording-fps", required_argument, NULL, 0x400},
	    {"recording-max-s", required_argument, NULL, 0x401},
	    {"recording-max-mb", required_argument, NULL, 0x402},
	    {"recordings-per-computer", required_argument, NULL, 0x403},
	    {"max-recordings", required_argument, NULL, 0x404},
	    {"recording-keep-days", required_argument, NULL, 0x405},
	    {"egress-allow", required_argument, NULL, 'A'},
	    {"egress-deny", required_argument, NULL, 'D'},
	    {"cluster-etcd", required_argument, NULL, 0x301},
	    {"host-id", required_argument, NULL, 0x302},
	    {"advertise", required_argument, NULL, 0x303},
	    {"cluster-ttl", required_argument, NULL, 0x304},
	    {"cluster-secret-file", required_argument, NULL, 0x305},
	    {"sessions-dir", required_argument, NULL, 0x306},
	    {"capacity", required_argument, NULL, 0x307},
	    {"config", required_argument, NULL, 0x308},
	    {"metrics-open", no_argument, NULL, 0x320},
	    {"log-format", required_argument, NULL, 0x321},
	    {"guest-ca-certs", required_argument, NULL, 0x310},
	    {"pip-index-url", required_argument, NULL, 0x311},
	    {"npm-registry", required_argument, NULL, 0x312},
	    {"guest-sizes", required_argument, NULL, 0x313},
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
		case 0x300:
			database = optarg;
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
		case 'O':
			mcp_origins = optarg;
			break;
		case 'T':
			stream_ttl_max = (int)main_number(optarg, "--stream-ttl-max", 1, 86400);
			break;
		case 'M':
			stream_max = (int)main_number(optarg, "--stream-max", 1, 7 * 86400);
			break;
		case 0x5301:
			streams_per_computer =
			    (int)main_number(optarg, "--streams-per-computer", 1, 10000);
			break;
		case 0x5401:
			preview_listen = optarg;
			break;
		case 0x5402:
			ao.preview_url = optarg;
			break;
		case 0x5403:
			ao.preview_ttl_max_s = (int)main_number(optarg, "--preview-ttl-max", 1,
								CORE_PREVIEW_TOKEN_MAX_S);
			break;
		case 0x5404:
			ao.previews_per_computer =
			    (int)main_number(optarg, "--previews-per-computer", 1, 10000);
			break;
		case 0x5405:
			ao.preview_idle_s = (int)main_number(optarg, "--preview-idle", 1, 86400);
			break;
		case 0x5406:
			ao.public_previews = true;
			break;
		case 1001:
			rc.cpu_ms = (int)main_number(optarg, "--run-cpu-ms", 1, 60000);
			break;
		case 1002:
			rc.wall_ms = (int)main_number(optarg, "--run-wall-ms", 1, 3600000);
			break;
		case 1003:
			rc.mem_mb = (int)main_number(optarg, "--run-memory-mb", 16, 65536);
			break;
		case 1004:
			rc.out_max = (size_t)main_number(optarg, "--run-output-max", 1, 64 << 20);
			break;
		case 1005:
			rc.code_max = (size_t)main_number(optarg, "--run-code-max", 1, 10240);
			break;
		case 1006:
			rc.max_concurrent = (int)main_number(optarg, "--run-concurrency", 1, 4096);
			break;
		case 1007:
			rc.pool = (int)main_number(optarg, "--run-pool", 1, 256);
			break;
		case 1008:
			rc.uid = rc.gid = (uid_t)main_number(optarg, "--run-uid", 1, 4294967294LL);
			break;
		case 0x100:
			envd_limits.max_answer =
			    (size_t)main_number(optarg, "--max-envd-answer-mb", 1, 4096) << 20;
			break;
		case 0x101:
			envd_limits.action_s =
			    (long)main_number(optarg, "--envd-timeout", 1, 86400);
			break;
		case 0x102:
			cfg.spool_max_workspace =
			    (uint64_t)main_number(optarg, "--spool-max-workspace-mb", 1, 1 << 30)
			    << 20;
			break;
		case 0x103:
			cfg.spool_max = (uint64_t)main_number(optarg, "--spool-max-mb", 1, 1 << 30)
					<< 20;
			break;
		case 0x104:
			cfg.spool_min_free =
			    (uint64_t)main_number(optarg, "--spool-min-free-mb", 0, 1 << 30) << 20;
			if (!cfg.spool_min_free)
				cfg.spool_min_free = 1; /* 0 would mean the default */
			break;
		case 0x105:
			cfg.default_max_stopped =
			    (int)main_number(optarg, "--max-stopped-per-workspace", 1, 100000);
			break;
		case 0x106: {
			long long mb = main_number(optarg, "--session-quota-mb", 0, 1 << 24);
			if (mb > 0 && mb < 16) {
				fprintf(stderr,
					"cubicled: --session-quota-mb: at least 16 (an ext4 "
					"filesystem needs it), or 0 for none\n");
				return 2;
			}
			cfg.session_quota = (uint64_t)mb << 20;
			session_quota_set = true;
			break;
		}
		case 0x107:
			envd_limits.max_answers =
			    (size_t)main_number(optarg, "--max-envd-answers-mb", 1, 1 << 20) << 20;
			break;
		case 0x200:
			ao.max_requests = (int)main_number(optarg, "--max-requests", 2, 100000);
			break;
		case 0x201:
			ao.max_requests_per_workspace =
			    (int)main_number(optarg, "--max-requests-per-workspace", 1, 100000);
			break;
		case 0x202:
			ao.max_waits_per_workspace =
			    (int)main_number(optarg, "--max-waits-per-workspace", 1, 100000);
			break;
		case 0x203:
			ao.max_conns_per_addr =
			    (int)main_number(optarg, "--max-conns-per-addr", 1, 100000);
			break;
		case 0x204:
			ao.max_body = (size_t)main_number(optarg, "--max-body", 1024, 1ll << 30);
			break;
		case 0x205:
			ao.max_body_anonymous =
			    (size_t)main_number(optarg, "--max-body-anonymous", 256, 1 << 20);
			break;
		case 0x206:
			ao.header_timeout_s = (int)main_number(optarg, "--header-timeout", 1, 3600);
			break;
		case 0x207:
			ao.body_timeout_s = (int)main_number(optarg, "--body-timeout", 1, 3600);
			break;
		case 0x208:
			ao.body_min_rate = (int)main_number(optarg, "--body-min-rate", 1, 1 << 30);
			break;
			break;
		case 0x7100:
			cfg.templates.builtin_dir = optarg;
			break;
		case 0x7101:
			cfg.templates.cache_dir = optarg;
			break;
		case 0x7102:
			cfg.templates.max_builds =
			    (int)main_number(optarg, "--max-template-builds", 1, 64);
			break;
		case 0x7103:
			cfg.templates.max_per_workspace =
			    (int)main_number(optarg, "--max-templates-per-workspace", 1, 100000);
			break;
		case 0x7104:
			cfg.templates.max_mb =
			    main_number(optarg, "--template-max-mb", 16, 1 << 20);
			break;
		case 0x7105:
			cfg.templates.timeout_s =
			    (int)main_number(optarg, "--template-build-timeout", 10, 86400);
			break;
		case 0x7106:
			cfg.templates.cache_keep =
			    (int)main_number(optarg, "--template-cache-keep", 0, 100000);
			break;
		case 0x7107:
			build_templates = true;
			break;
		case 0x400:
			cfg.record_fps = (int)main_number(optarg, "--recording-fps", 1, 30);
			break;
		case 0x401:
			cfg.record_max_s = (int)main_number(optarg, "--recording-max-s", 1, 86400);
			break;
		case 0x402:
			cfg.record_max_bytes =
			    (uint64_t)main_number(optarg, "--recording-max-mb", 8, 1 << 20) << 20;
			break;
		case 0x403:
			cfg.record_per_computer =
			    (int)main_number(optarg, "--recordings-per-computer", 1, 16);
			break;
		case 0x404:
			cfg.record_per_host = (int)main_number(optarg, "--max-recordings", 1, 1024);
			break;
		case 0x405:
			cfg.record_keep_days =
			    (int)main_number(optarg, "--recording-keep-days", 1, 36500);
			break;
		case 'A':
		case 'D': {
			struct err pe = {0};
			const char *flag = ch == 'A' ? "--egress-allow" : "--egress-deny";
			if (guest_net_list_parse(ch == 'A' ? &egress_allow : &egress_deny, optarg,
						 ch == 'A', flag, &pe) < 0) {
				fprintf(stderr, "cubicled: %s\n", pe.message);
				return 2;
			}
			break;
		}
		case 0x301:
			cluster_etcd = optarg;
			break;
		case 0x302:
			host_id_given = optarg;
			break;
		case 0x303:
			advertise = optarg;
			break;
		case 0x304:
			cluster_ttl = (int)main_number(optarg, "--cluster-ttl", 2, 3600);
			break;
		case 0x305:
			secret_file = optarg;
			break;
		case 0x306:
			sessions_dir = optarg;
			break;
		case 0x307:
			if (main_capacity(optarg, &cluster) < 0)
				return 2;
			break;
		case 0x308: /* read before the others (main_config_file) */
			break;
		case 0x320:
			ao.metrics_open = true;
			break;
		case 0x321: {
			enum log_format lf;
			if (log_format_parse(optarg, &lf) < 0) {
				fprintf(stderr,
					"cubicled: --log-format takes text or json, not '%s'\n",
					optarg);
				return 2;
			}
			if (log_set_format(lf, "cubicled") < 0)
				fprintf(stderr,
					"cubicled: cannot log as JSON; the log stays text\n");
			break;
		}
		case 0x310:
			guest_ca_dir = optarg;
			break;
		case 0x311:
			pip_index_url = optarg;
			break;
		case 0x312:
			npm_registry = optarg;
			break;
		case 0x313:
			if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
				fprintf(stderr, "cubicled: --guest-sizes takes on or off\n");
				return 2;
			}
			cfg.host_sizes = strcmp(optarg, "off") == 0;
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
	/* The build's layout: bin/cubicled beside images/, webclient/,
	 * templates/ and the code runner's supervisors. */
	char bin_dir[PATH_MAX];
	ssize_t bn = readlink("/proc/self/exe", bin_dir, sizeof bin_dir - 1);
	bin_dir[bn > 0 ? bn : 0] = 0;
	if (strrchr(bin_dir, '/'))
		*strrchr(bin_dir, '/') = 0;
	char templates_dir[PATH_MAX + 16];
	if (!cfg.templates.builtin_dir) {
		snprintf(templates_dir, sizeof templates_dir, "%s/../templates", bin_dir);
		cfg.templates.builtin_dir = templates_dir;
	}
	/* What every guest is told at each start (guest-setup.h). */
	char *guest_setup = NULL;
	{
		struct err ge = {0};
		int ncerts, nfiles;
		if (guest_setup_build(guest_ca_dir, pip_index_url, npm_registry, &guest_setup,
				      &ncerts, &nfiles, &ge) < 0) {
			fprintf(stderr, "cubicled: %s\n", ge.message);
			return 2;
		}
		if (ncerts)
			fprintf(stderr,
				"cubicled: guests trust %d CA certificate%s from %s (%d file%s)\n",
				ncerts, ncerts == 1 ? "" : "s", guest_ca_dir, nfiles,
				nfiles == 1 ? "" : "s");
		cfg.guest_setup = guest_setup;
		cfg.templates.guest_setup = guest_setup; /* a template's build is told it too */
	}
	if (build_templates && optind == argc) {
		/* make images: the built-in templates into the cache. */
		char images_path[PATH_MAX + 16];
		if (images)
			snprintf(images_path, sizeof images_path, "%s", images);
		else
			snprintf(images_path, sizeof images_path, "%s/../images", bin_dir);
		struct err be = {0};
		int brc = core_templates_build_builtin(&cfg.templates, images_path, &egress_allow,
						       &egress_deny, &be);
		free(guest_setup);
		if (brc < 0) {
			fprintf(stderr, "cubicled: %s\n", be.message);
			return 1;
		}
		return 0;
	}
	if (!state_dir || optind != argc) {
		main_usage(stderr);
		return 2;
	}
	/* One workspace must not be able to hold every worker. */
	if (ao.max_requests <= ao.max_requests_per_workspace + ao.max_waits_per_workspace) {
		fprintf(
		    stderr,
		    "cubicled: --max-requests (%d) must be more than --max-requests-per-workspace "
		    "+ --max-waits-per-workspace (%d + %d), or one workspace can hold every "
		    "worker\n",
		    ao.max_requests, ao.max_requests_per_workspace, ao.max_waits_per_workspace);
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
		snprintf(images_abs, sizeof images_abs, "%s/../images", bin_dir);
	} else {
		snprintf(images_abs, sizeof images_abs, "%s", images);
	}
	char images_real[PATH_MAX + 16];
	if (!realpath(images_abs, images_real))
		snprintf(images_real, sizeof images_real, "%s", images_abs);
	cfg.state_dir = state_abs;
	char sessions_real[PATH_MAX];
	if (sessions_dir) {
		if (mkdir(sessions_dir, 0711) < 0 && errno != EEXIST) {
			fprintf(stderr, "cubicled: --sessions-dir %s: %s\n", sessions_dir,
				strerror(errno));
			return 1;
		}
		if (!realpath(sessions_dir, sessions_real)) {
			fprintf(stderr, "cubicled: --sessions-dir %s: %s\n", sessions_dir,
				strerror(errno));
			return 1;
		}
		cfg.sessions_dir = sessions_real;
	}
	/* The database: $CUBICLE_DATABASE (wiped from the environment), else
	 * --database, else the state directory's SQLite. */
	char *database_env = main_database(database);
	const char *where = database_env ? database_env : database;
	/* A cluster: its flags, checked before anything starts. */
	char host_id[64], address[128];
	struct nodeauth *nodeauth = NULL;
	if (cluster_etcd) {
		if (!where || !store_where_is_postgres(where)) {
			fprintf(stderr,
				"cubicled: --cluster-etcd needs --database postgresql://...: "
				"the hosts of a cluster share their state there\n");
			return 2;
		}
		main_host_id(host_id_given, host_id);
		if (!ident_ok(host_id, 63)) {
			fprintf(stderr,
				"cubicled: --host-id: 1 to 63 of A-Z a-z 0-9 - _, not '%s'\n",
				host_id);
			return 2;
		}
		/* Where the others call us: an IPv4 address and a port (the event
		 * loop relays streams there and must not wait on a name lookup). */
		const char *adv = advertise ? advertise : listen;
		if (strncmp(adv, "tcp:", 4) == 0)
			adv += 4;
		char ip[64];
		const char *colon = strrchr(adv, ':');
		struct in_addr in;
		long port = colon ? strtol(colon + 1, NULL, 10) : 0;
		if (!colon || (size_t)(colon - adv) >= sizeof ip || port <= 0 || port > 65535 ||
		    (snprintf(ip, sizeof ip, "%.*s", (int)(colon - adv), adv), 0) ||
		    inet_pton(AF_INET, ip, &in) != 1 || in.s_addr == htonl(INADDR_ANY)) {
			fprintf(stderr,
				"cubicled: --advertise: IP:PORT the other hosts reach this one at "
				"(an IPv4 address, not 0.0.0.0), not '%s'%s\n",
				adv, advertise ? "" : " (from --listen)");
			return 2;
		}
		snprintf(address, sizeof address, "%s:%ld", ip, port);
		char *secret = main_secret_from(secret_file, "CUBICLE_CLUSTER_SECRET");
		if (!secret) {
			fprintf(stderr,
				"cubicled: a cluster needs its secret: --cluster-secret-file "
				"FILE or $CUBICLE_CLUSTER_SECRET (the same on every host)\n");
			return 2;
		}
		struct err ne = {0};
		nodeauth = nodeauth_create(secret, &ne);
		explicit_bzero(secret, strlen(secret));
		free(secret);
		if (!nodeauth) {
			fprintf(stderr, "cubicled: %s\n", ne.message);
			return 2;
		}
		cluster.etcd = cluster_etcd;
		cluster.host_id = host_id;
		cluster.address = address;
		cluster.ttl_s = cluster_ttl;
		cluster.nodeauth = nodeauth;
		cfg.cluster = cluster;
		ao.nodeauth = nodeauth;
	} else if (host_id_given || advertise || secret_file) {
		fprintf(stderr, "cubicled: --host-id, --advertise and --cluster-secret-file are "
				"for a cluster: add --cluster-etcd\n");
		return 2;
	}
	char recorder[PATH_MAX + 32];
	snprintf(recorder, sizeof recorder, "%s/cubicle-record", bin_dir);
	cfg.recorder = recorder;
	cfg.record_uid = rc.uid;
	if (!session_quota_set)
		cfg.session_quota = 10240ull << 20;
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
	envd_set_limits(&envd_limits);
	struct store *store = store_open(where ? where : db, &e);
	if (database_env) {
		explicit_bzero(database_env, strlen(database_env));
		free(database_env);
	}
	if (!store) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	fprintf(stderr, "cubicled: store: %s\n", store_backend(store));
	struct core *core = core_open(&cfg, store, &e);
	if (!core) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	snprintf(spool, sizeof spool, "%s/spool", state_abs);
	/* Stream tokens are signed with the SHA-256 of a secret of the state dir. */
	char *stream_secret = main_state_secret(state_abs, "stream.key", "");
	if (!stream_secret)
		return 1;
	unsigned char stream_key[TOKEN_KEY_BYTES];
	SHA256((const unsigned char *)stream_secret, strlen(stream_secret), stream_key);
	free(stream_secret);
	if (strcmp(store_backend(store), "postgresql") == 0) {
		/* Hosts that share a database share the key, so a token verifies
		 * on any of them; the first host's own key seeds it. */
		struct store_stream_key sk;
		if (store_stream_key_current(store, stream_key, &sk, &e) < 0) {
			fprintf(stderr, "cubicled: %s\n", e.message);
			return 1;
		}
		memcpy(stream_key, sk.secret, sizeof stream_key);
		explicit_bzero(&sk, sizeof sk);
	}
	char web_dir[PATH_MAX + 16];
	if (web) {
		snprintf(web_dir, sizeof web_dir, "%s", web);
	} else {
		snprintf(web_dir, sizeof web_dir, "%s/../webclient", bin_dir);
	}
	rc.bin_dir = bin_dir;
	rc.store = store;
	struct runner *runner = runner_open(&rc, &e);
	if (!runner) {
		fprintf(stderr, "cubicled: %s\n", e.message);
		return 1;
	}
	ao.listen = listen;
	/* Previews beside the API: its host, the next port (any free one
	 * when the API's is). */
	char preview_default[300];
	if (!preview_listen) {
		const char *colon = strrchr(listen, ':');
		long port = colon ? atol(colon + 1) : 8080;
		snprintf(preview_default, sizeof preview_default, "%.*s:%ld",
			 colon ? (int)(colon - listen) : 9, colon ? listen : "127.0.0.1",
			 port ? port + 1 : 0);
		preview_listen = preview_default;
	}
	ao.preview_listen = strcmp(preview_listen, "off") == 0 ? NULL : preview_listen;
	ao.admin_key = admin;
	ao.spool_dir = spool;
	ao.stream_key = stream_key;
	ao.web_dir = web_dir;
	ao.frame_ancestors = frame_ancestors;
	ao.stream_ttl_max_s = stream_ttl_max;
	ao.stream_max_s = stream_max;
	ao.mcp_origins = mcp_origins;
	ao.streams_per_computer = streams_per_computer;
	ao.runner = runner;
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
	printf("cubicled: listening on %s (images %s, state %s, previews %s)\n",
	       api_address(main_api), images_real, state_abs,
	       *api_preview_address(main_api) ? api_preview_address(main_api) : "off");
	fflush(stdout);
	api_run(main_api);
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	/* The core's operations may still call into the API (to close a
	 * stopped computer's streams): end them while the API exists. */
	if (core_quiesce(core) < 0) {
		fprintf(stderr,
			"cubicled: operations still running after 30 s; exiting without them\n");
		return 0;
	}
	struct api *api = main_api;
	main_api = NULL;
	api_destroy(api);
	runner_close(runner);
	core_close(core);
	store_close(store);
	nodeauth_destroy(nodeauth);
	free(admin);
	free(guest_setup);
	return 0;
}
