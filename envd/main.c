/*
 * envd: the agent inside every cubicle computer.
 *
 *   envd --listen unix:PATH | tcp:HOST:PORT --token-file FILE [--user NAME]
 *        [--vnc unix:PATH | port:DEV]
 *   envd --connect http(s)://HOST[:PORT] [--token-file FILE|-] [--credential-file FILE]
 *        (a machine you bring: dials cubicled, see connect.h)
 *
 * Drives the X display in $DISPLAY (when there is one) and serves the HTTP
 * API of server.h. Prints "envd: listening on <address>" on stdout once it
 * accepts connections, so a supervisor or a test knows where to connect.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "action.h"
#include "clipboard.h"
#include "connect.h"
#include "desk.h"
#include "envd.h"
#include "log.h"
#include "pkg-sock.h"
#include "server.h"
#include "session.h"
#include "procview.h"
#include "userenv.h"
#include "vnc.h"

static struct server *main_server;
static struct connector *main_connector;
static char main_end_why[512];

/* --connect: the server ends when cubicled ends the machine. */
static void *main_connect_watch(void *arg)
{
	(void)arg;
	connect_wait_end(main_connector, main_end_why, sizeof main_end_why);
	if (main_server)
		server_stop(main_server);
	return NULL;
}

static void main_on_signal(int sig)
{
	(void)sig;
	if (main_server)
		server_stop(main_server);
}

static void main_usage(FILE *to)
{
	fputs("usage: envd --listen unix:PATH|tcp:HOST:PORT --token-file FILE [options]\n"
	      "       envd --connect http(s)://HOST[:PORT] [--token-file FILE|-] [options]\n"
	      "\n"
	      "  --connect URL       dial cubicled at URL and serve it over one WebSocket (a\n"
	      "                      machine you bring); the token is the connect token, '-'\n"
	      "                      reads it from stdin; later runs use the credential\n"
	      "  --credential-file F where --connect keeps this machine's credential (0600;\n"
	      "                      default $HOME/.config/cubicle-envd.credential)\n"
	      "  --listen ADDR       where to serve the HTTP API (tcp port 0 = any free port)\n"
	      "  --log-format F      text (default) or json: one JSON object per line\n"
	      "  --token-file FILE   the bearer token clients must send (first line of FILE)\n"
	      "  --user NAME         run client commands and file access as this user\n"
	      "  --session desktop   start and supervise the desktop session (Xvfb, D-Bus,\n"
	      "                      AT-SPI, xfce4-session) as --user; default: none\n"
	      "  --resolution WxH    the session's screen size (default 1280x800)\n"
	      "  --vnc unix:PATH     serve the display over RFB (VNC) on this UNIX socket\n"
	      "  --vnc port:DEV      ... or on this virtio-serial port (default in a microVM:\n"
	      "                      the port named cubicle.vnc, if any)\n"
	      "  --guest             the root agent of a cubicle computer: serve the user's\n"
	      "                      package helper (" PKG_SOCK_DEFAULT ") and the host's\n"
	      "                      setup (POST /v1/setup)\n"
	      "  --sizes SPEC        serve the container's size files (guest/procview.h)\n"
	      "  --max-body BYTES    largest action request body (default 64 MiB)\n"
	      "  --max-read-file BYTES  read_file's limit (default 16 MiB)\n"
	      "  --version           print the version\n"
	      "\n"
	      "The X display is $DISPLAY; without one envd serves shell and files only.\n",
	      to);
}

/* Reads the token: the first line of the file ("-": stdin), at least 16 characters. */
static char *main_read_token(const char *path)
{
	FILE *f = strcmp(path, "-") == 0 ? fdopen(dup(0), "r") : fopen(path, "r");
	if (!f) {
		fprintf(stderr, "envd: cannot read --token-file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	char buf[1024];
	char *line = fgets(buf, sizeof buf, f);
	fclose(f);
	if (!line) {
		fprintf(stderr, "envd: --token-file %s is empty\n", path);
		return NULL;
	}
	buf[strcspn(buf, "\r\n")] = 0;
	if (strlen(buf) < 16) {
		fprintf(stderr, "envd: the token in %s is shorter than 16 characters\n", path);
		return NULL;
	}
	return strdup(buf);
}

static long long main_parse_size(const char *s, const char *flag)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v <= 0) {
		fprintf(stderr, "envd: %s takes a positive number of bytes, not '%s'\n", flag, s);
		exit(2);
	}
	return v;
}

/*
 * In a microVM the host's live view comes through the virtio-serial port
 * named "cubicle.vnc" (there is no udev to make /dev/virtio-ports/ links):
 * "port:/dev/vportNpM" when there is one.
 */
static bool main_vnc_port(char *out, size_t len)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d))) {
		char path[300], name[64] = "";
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", de->d_name);
		FILE *f = de->d_name[0] != '.' ? fopen(path, "re") : NULL;
		if (!f)
			continue;
		if (fgets(name, sizeof name, f) && strcmp(name, "cubicle.vnc\n") == 0) {
			snprintf(out, len, "port:/dev/%.40s", de->d_name);
			found = true;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

int main(int argc, char **argv)
{
	const char *listen = NULL, *token_file = NULL, *user = NULL, *session_kind = "none";
	const char *vnc_addr = NULL, *connect_url = NULL, *cred_file = NULL;
	int width = 1280, height = 800;
	struct envd env = {
	    .run_as_uid = (uid_t)-1,
	    .run_as_gid = (gid_t)-1,
	    .max_body = 64u << 20,
	    .max_read_file = 16u << 20,
	};
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"token-file", required_argument, NULL, 't'},
	    {"user", required_argument, NULL, 'u'},
	    {"max-body", required_argument, NULL, 'b'},
	    {"max-read-file", required_argument, NULL, 'r'},
	    {"session", required_argument, NULL, 's'},
	    {"resolution", required_argument, NULL, 'R'},
	    {"vnc", required_argument, NULL, 'v'},
	    {"connect", required_argument, NULL, 'C'},
	    {"credential-file", required_argument, NULL, 'F'},
	    {"log-format", required_argument, NULL, 'L'},
	    {"guest", no_argument, NULL, 'G'},
	    {"sizes", required_argument, NULL, 'S'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	/* Not an option for people: envd runs itself so to read a11y trees. */
	if (argc == 2 && strcmp(argv[1], "--a11y-tree") == 0)
		a11y_helper_main();
	/* The user's apt-get and apt in a guest are envd under those names. */
	const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	if (strcmp(base, "apt-get") == 0 || strcmp(base, "apt") == 0)
		pkg_client_main(base, argc, argv);
	const char *sizes_spec = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			listen = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'u':
			user = optarg;
			break;
		case 'b':
			env.max_body = (size_t)main_parse_size(optarg, "--max-body");
			break;
		case 'r':
			env.max_read_file = (size_t)main_parse_size(optarg, "--max-read-file");
			break;
		case 's':
			session_kind = optarg;
			if (strcmp(optarg, "desktop") != 0 && strcmp(optarg, "none") != 0) {
				fprintf(stderr, "envd: --session takes desktop or none\n");
				return 2;
			}
			break;
		case 'R': {
			char tail;
			if (sscanf(optarg, "%dx%d%c", &width, &height, &tail) != 2 || width < 64 ||
			    height < 64 || width > 8192 || height > 8192) {
				fprintf(stderr, "envd: --resolution WxH, 64..8192 each, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'v':
			vnc_addr = optarg;
			if ((strncmp(optarg, "unix:", 5) != 0 || !optarg[5]) &&
			    strncmp(optarg, "port:/", 6) != 0) {
				fprintf(stderr,
					"envd: --vnc takes unix:PATH or port:/dev/vportNpM\n");
				return 2;
			}
			break;
		case 'C':
			connect_url = optarg;
			break;
		case 'F':
			cred_file = optarg;
			break;
		case 'L': {
			enum log_format lf;
			if (log_format_parse(optarg, &lf) < 0) {
				fprintf(stderr, "envd: --log-format takes text or json, not '%s'\n",
					optarg);
				return 2;
			}
			log_set_format(lf, "envd");
			break;
		}
		case 'G':
			env.guest = true;
			break;
		case 'S':
			sizes_spec = optarg;
			break;
		case 'V':
			printf("envd %s\n", CUBICLE_VERSION);
			return 0;
		case 'h':
			main_usage(stdout);
			return 0;
		default:
			main_usage(stderr);
			return 2;
		}
	}
	if (connect_url ? listen != NULL : (!listen || !token_file) || optind != argc) {
		main_usage(stderr);
		return 2;
	}
	if (connect_url && env.guest) {
		fprintf(stderr, "envd: --guest is for cubicle's own computers, not --connect\n");
		return 2;
	}
	/* The size files first: anything that reads them before they are
	 * served waits for them. */
	if (sizes_spec) {
		struct procview_opts so;
		struct err se = {0};
		if (procview_parse(sizes_spec, &so, &se) < 0 || procview_start(&so, &se) < 0) {
			fprintf(stderr, "envd: %s\n", se.message);
			return 1;
		}
	}
	userenv_load(NULL);
	char *token = token_file ? main_read_token(token_file) : NULL;
	if (token_file && !token)
		return 2;
	/* A machine you bring: envd's own servers on UNIX sockets in a private
	 * directory; the connector relays cubicled's streams to them. */
	char conn_dir[4096] = "", listen_buf[4200], vnc_buf[4200], cred_buf[4200];
	if (connect_url) {
		const char *rt = getenv("XDG_RUNTIME_DIR");
		snprintf(conn_dir, sizeof conn_dir, "%s/envd-connect-XXXXXX",
			 rt && *rt && access(rt, W_OK) == 0 ? rt : "/tmp");
		if (!mkdtemp(conn_dir)) {
			fprintf(stderr, "envd: cannot make %s: %s\n", conn_dir, strerror(errno));
			return 1;
		}
		snprintf(listen_buf, sizeof listen_buf, "unix:%s/envd.sock", conn_dir);
		listen = listen_buf;
		snprintf(vnc_buf, sizeof vnc_buf, "unix:%s/vnc.sock", conn_dir);
		if (!vnc_addr)
			vnc_addr = vnc_buf;
		if (!cred_file) {
			const char *h = getenv("HOME");
			snprintf(cred_buf, sizeof cred_buf, "%s/.config", h && *h ? h : "/root");
			mkdir(cred_buf, 0700);
			snprintf(cred_buf, sizeof cred_buf, "%s/.config/cubicle-envd.credential",
				 h && *h ? h : "/root");
			cred_file = cred_buf;
		}
	}
	char *home = NULL;
	if (user) {
		struct passwd *pw = getpwnam(user);
		if (!pw) {
			fprintf(stderr, "envd: --user %s: no such user\n", user);
			return 2;
		}
		env.run_as_uid = pw->pw_uid;
		env.run_as_gid = pw->pw_gid;
		home = strdup(pw->pw_dir);
		env.run_as_home = home;
	}

	signal(SIGPIPE, SIG_IGN);
	if (env.guest) {
		struct err pe = {0};
		if (pkg_sock_start(PKG_SOCK_DEFAULT, &pe) < 0)
			fprintf(stderr, "envd: no package helper: %s\n", pe.message);
	}
	/* Children we launch are reaped by whoever waits for them (shell.c
	 * waits for its own; launch.c double-forks). */

	struct err e = {0};
	if (strcmp(session_kind, "desktop") == 0) {
		struct session_opts so = {
		    .width = width,
		    .height = height,
		    .uid = env.run_as_uid,
		    .gid = env.run_as_gid,
		    .home = env.run_as_home,
		    .user = user,
		};
		env.session = session_start(&so, &e);
		if (!env.session) {
			fprintf(stderr, "envd: cannot start the desktop session: %s\n", e.message);
			return 1;
		}
	}
	env.display = getenv("DISPLAY");
	if (env.display && *env.display) {
		env.desk = desk_open(env.display, &e);
		if (!env.desk)
			fprintf(stderr, "envd: no display actions: %s\n", e.message);
		else if (!(env.clipboard = clipboard_open(env.display, &e)))
			fprintf(stderr, "envd: no clipboard: %s\n", e.message);
		if (env.desk)
			desk_set_client(env.desk, env.run_as_uid, env.run_as_gid);
	} else {
		env.display = NULL;
	}
	char port_addr[64];
	if (!vnc_addr && env.desk && main_vnc_port(port_addr, sizeof port_addr))
		vnc_addr = port_addr; /* a microVM's live view */
	if (vnc_addr && (!env.desk || !env.clipboard)) {
		fprintf(stderr, "envd: --vnc %s: no X display to serve, so no RFB server\n",
			vnc_addr);
	} else if (vnc_addr && !(env.vnc = vnc_start(&env, vnc_addr, &e))) {
		/* The desktop still works through the API; only streaming is off. */
		fprintf(stderr, "envd: --vnc %s: no RFB server: %s\n", vnc_addr, e.message);
	}

	struct connector *cn = NULL;
	if (connect_url) {
		char host[256] = "machine";
		gethostname(host, sizeof host - 1);
		int sw = 0, sh = 0;
		if (env.desk)
			desk_screen_size(env.desk, &sw, &sh, NULL);
		struct connect_opts co = {
		    .url = connect_url,
		    .token = token,
		    .credential_file = cred_file,
		    .http_sock = listen + 5,
		    .vnc_sock = env.vnc ? vnc_addr + 5 : NULL,
		    .hostname = host,
		    .display = env.desk != NULL,
		    .width = sw,
		    .height = sh,
		};
		cn = connect_start(&co, &e);
		char api_token[80];
		if (!cn || connect_hello(cn, api_token, sizeof api_token, &e) < 0) {
			fprintf(stderr, "envd: %s\n", e.message);
			return 3;
		}
		free(token);
		token = strdup(api_token);
		main_connector = cn;
	}
	struct server_opts so = {.listen = listen, .token = token};
	main_server = server_create(&env, &so, &e);
	if (!main_server) {
		fprintf(stderr, "envd: %s\n", e.message);
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = main_on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	printf("envd: listening on %s\n", server_address(main_server));
	fflush(stdout);
	if (main_connector) {
		pthread_t t;
		pthread_create(&t, NULL, main_connect_watch, NULL);
		pthread_detach(t);
	}
	server_run(main_server);
	if (main_end_why[0]) {
		/* cubicled ended this machine: say why, and exit without waiting. */
		fprintf(stderr, "envd: %s\n", main_end_why);
		char p[4200];
		snprintf(p, sizeof p, "%s/envd.sock", conn_dir);
		unlink(p);
		snprintf(p, sizeof p, "%s/vnc.sock", conn_dir);
		unlink(p);
		rmdir(conn_dir);
		session_stop(env.session);
		_exit(3);
	}
	if (server_destroy(main_server) < 0) {
		/* Actions still run on the desk and the session: exit around them. */
		session_stop(env.session);
		_exit(0);
	}
	main_server = NULL;

	vnc_stop(env.vnc); /* its viewers use the desk and the clipboard */
	if (env.clipboard)
		clipboard_close(env.clipboard);
	desk_close(env.desk);
	session_stop(env.session);
	free(home);
	free(token);
	return 0;
}
