/*
 * drivertool: runs one call of the container driver from the command line,
 * so tests (tests/host/test_container.py) drive the real driver the way
 * cubicled's core does, one process per call, with the driver's state kept
 * in a JSON file between calls as the core keeps it in SQLite.
 *
 *   drivertool create|start|stop|destroy|alive|address|available|export
 *       --dir D --image IMAGE_DIR --state STATE.json [--id ID]
 *       [--kind desktop|sandbox] [--millicpus N] [--memory-mb N] [--pids N]
 *       [--disk-mb N (0, the default: no disk quota)]
 *       [--session DIR] [--token-file F] [--resolution WxH]
 *       [--envd-user NAME] [--to DEST [--max-mb N]]
 *
 * export copies a stopped computer's layer to DEST (layer.h) and prints
 * its figures.
 *
 * Exit status 0 on success (alive: prints true or false), 1 with
 * "drivertool: <code>: <message>" on stderr otherwise, 2 on bad usage.
 * The state file is written back after every call, failed ones included.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
#include "layer.h"

static void drivertool_usage(void)
{
	fprintf(stderr,
		"usage: drivertool create|start|stop|destroy|alive|address|available --dir D "
		"--image IMAGE_DIR --state STATE.json [--id ID] [--kind desktop|sandbox] "
		"[--millicpus N] [--memory-mb N] [--pids N] [--disk-mb N] [--session DIR] "
		"[--token-file F] "
		"[--resolution WxH] [--envd-user NAME] [--to DEST [--max-mb N]]\n");
}

/* The first line of a file, without its newline; the caller frees it. */
static char *drivertool_read_line(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, f);
	fclose(f);
	if (n < 0) {
		free(line);
		return NULL;
	}
	line[strcspn(line, "\r\n")] = '\0';
	return line;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		drivertool_usage();
		return 2;
	}
	const char *cmd = argv[1];
	struct driver_computer c;
	memset(&c, 0, sizeof(c));
	c.kind = "sandbox";
	c.width = 1280;
	c.height = 800;
	c.millicpus = 1000;
	c.memory_mb = 1024;
	c.pids_max = 512;
	const char *state_path = NULL, *token_file = NULL, *to = NULL;
	long long max_mb = 0;
	static const struct option opts[] = {{"dir", required_argument, NULL, 'd'},
					     {"image", required_argument, NULL, 'i'},
					     {"state", required_argument, NULL, 's'},
					     {"id", required_argument, NULL, 'I'},
					     {"kind", required_argument, NULL, 'k'},
					     {"millicpus", required_argument, NULL, 'c'},
					     {"memory-mb", required_argument, NULL, 'm'},
					     {"pids", required_argument, NULL, 'p'},
					     {"disk-mb", required_argument, NULL, 'D'},
					     {"session", required_argument, NULL, 'S'},
					     {"token-file", required_argument, NULL, 't'},
					     {"resolution", required_argument, NULL, 'r'},
					     {"envd-user", required_argument, NULL, 'u'},
					     {"to", required_argument, NULL, 'T'},
					     {"max-mb", required_argument, NULL, 'M'},
					     {NULL, 0, NULL, 0}};
	optind = 2;
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'd':
			c.dir = optarg;
			break;
		case 'i':
			c.image_dir = optarg;
			break;
		case 's':
			state_path = optarg;
			break;
		case 'I':
			c.id = optarg;
			break;
		case 'k':
			c.kind = optarg;
			break;
		case 'c':
			c.millicpus = atoi(optarg);
			break;
		case 'm':
			c.memory_mb = atoll(optarg);
			break;
		case 'p':
			c.pids_max = atoi(optarg);
			break;
		case 'D':
			c.disk_mb = atoll(optarg);
			break;
		case 'S':
			c.session_dir = optarg;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'u':
			c.envd_user = optarg;
			break;
		case 'T':
			to = optarg;
			break;
		case 'M':
			max_mb = atoll(optarg);
			break;
		case 'r':
			if (sscanf(optarg, "%dx%d", &c.width, &c.height) != 2) {
				drivertool_usage();
				return 2;
			}
			break;
		default:
			drivertool_usage();
			return 2;
		}
	}
	if (strcmp(cmd, "available") == 0) {
		char why[512];
		bool ok = driver_container.available(why, sizeof(why));
		printf("%s%s%s\n", ok ? "true" : "false", ok ? "" : ": ", ok ? "" : why);
		return ok ? 0 : 1;
	}
	if (!c.dir || !c.image_dir || !state_path) {
		drivertool_usage();
		return 2;
	}
	if (!c.id) {
		const char *slash = strrchr(c.dir, '/');
		c.id = slash && slash[1] ? slash + 1 : c.dir;
	}
	char *token = NULL;
	if (token_file && !(token = drivertool_read_line(token_file))) {
		fprintf(stderr, "drivertool: cannot read %s: %s\n", token_file, strerror(errno));
		return 2;
	}
	c.envd_token = token;

	json_error_t jerr;
	c.state =
	    access(state_path, F_OK) == 0 ? json_load_file(state_path, 0, &jerr) : json_object();
	if (!json_is_object(c.state)) {
		fprintf(stderr, "drivertool: %s is not a JSON object\n", state_path);
		free(token);
		return 2;
	}

	struct err e;
	err_clear(&e);
	int rc = 0;
	if (strcmp(cmd, "create") == 0) {
		rc = driver_container.create(&c, &e);
	} else if (strcmp(cmd, "start") == 0) {
		rc = driver_container.start(&c, &e);
	} else if (strcmp(cmd, "stop") == 0) {
		rc = driver_container.stop(&c, &e);
	} else if (strcmp(cmd, "destroy") == 0) {
		rc = driver_container.destroy(&c, &e);
	} else if (strcmp(cmd, "export") == 0 && to) {
		struct layer_stats st;
		rc = driver_container.export_layer(&c, to, (uint64_t)max_mb << 20, &st, &e);
		if (rc == 0)
			printf("{\"bytes\": %llu, \"entries\": %llu, \"whiteouts\": %llu, "
			       "\"dropped\": %llu}\n",
			       (unsigned long long)st.bytes, (unsigned long long)st.entries,
			       (unsigned long long)st.whiteouts, (unsigned long long)st.dropped);
	} else if (strcmp(cmd, "alive") == 0) {
		printf("%s\n", driver_container.alive(&c) ? "true" : "false");
	} else if (strcmp(cmd, "address") == 0) {
		char addr[4200];
		rc = driver_container.envd_address(&c, addr, sizeof(addr), &e);
		if (rc == 0)
			printf("%s\n", addr);
	} else {
		drivertool_usage();
		json_decref(c.state);
		free(token);
		return 2;
	}
	if (json_dump_file(c.state, state_path, JSON_INDENT(1) | JSON_SORT_KEYS) < 0)
		fprintf(stderr, "drivertool: cannot write %s\n", state_path);
	if (rc < 0)
		fprintf(stderr, "drivertool: %s: %s\n", err_code_name(e.code), e.message);
	json_decref(c.state);
	free(token);
	return rc < 0 ? 1 : 0;
}
