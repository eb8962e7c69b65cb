/*
 * launch: start a desktop application, detached, the way a menu would.
 *
 * The app is looked up first as a .desktop id in the XDG data directories
 * (the Exec line is what a menu runs), then as a program in $PATH; a command
 * line with spaces is split like an Exec value. Everything the child needs
 * (path, argv, environment, groups) is prepared before fork, because between
 * fork and exec a threaded process may only make async-signal-safe calls.
 *
 * The child is started with a double fork: envd forks an intermediate that
 * forks the app and exits at once, so envd reaps the intermediate and the
 * app is re-parented to init; no zombie stays behind in envd however long
 * the app runs. The app leads its own session (its pid is the session id,
 * which lets desk_window_wait_new recognise windows of processes it forks)
 * and has stdio on /dev/null. Its pid and any failure before exec (setuid,
 * exec itself) travel back through a close-on-exec pipe: end of file means
 * exec succeeded.
 */
#include "launch.h"
#include "userenv.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define LAUNCH_MAX_DESKTOP_FILE (1024 * 1024)
#define LAUNCH_EXEC_TIMEOUT_MS	10000
#define LAUNCH_MAX_GROUPS	256

/* ---- Exec values ---- */

/* A growing argv under construction. */
struct launch_argv {
	char **v;
	size_t n, cap;
};

static int launch_argv_push(struct launch_argv *a, char *s)
{
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		char **v = realloc(a->v, cap * sizeof *v);
		if (!v)
			return -1;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
	return 0;
}

void launch_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

/* Undoes the string escapes of a desktop entry value (\s \n \t \r \\). */
static char *launch_unescape_string(const char *s)
{
	char *out = malloc(strlen(s) + 1);
	if (!out)
		return NULL;
	size_t k = 0;
	for (; *s; s++) {
		if (*s != '\\' || !s[1]) {
			out[k++] = *s;
			continue;
		}
		char c = s[1];
		char r = c == 's'    ? ' '
			 : c == 'n'  ? '\n'
			 : c == 't'  ? '\t'
			 : c == 'r'  ? '\r'
			 : c == '\\' ? '\\'
				     : 0;
		if (r) {
			out[k++] = r;
			s++;
		} else {
			out[k++] = '\\'; /* not a string escape: the quoting rules may use it */
		}
	}
	out[k] = '\0';
	return out;
}

char **launch_exec_argv(const char *exec, struct err *e)
{
	char *s = launch_unescape_string(exec ? exec : "");
	char *word = s ? malloc(strlen(s) + 1) : NULL;
	struct launch_argv a = {0};
	if (!s || !word) {
		free(s);
		free(word);
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	const char *p = s;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		size_t k = 0;
		bool had_code = false, quoted = false;
		while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
			if (*p == '"') {
				/* Inside double quotes a backslash escapes " ` $ and \. */
				quoted = true;
				p++;
				while (*p && *p != '"') {
					if (*p == '\\' && p[1] && strchr("\"`$\\", p[1]))
						p++;
					word[k++] = *p++;
				}
				if (*p != '"') {
					free(s);
					free(word);
					launch_argv_free(a.v);
					err_set(e, ERR_INVALID,
						"Exec: unterminated double quote in '%.200s'",
						exec);
					return NULL;
				}
				p++;
			} else if (*p == '%' && p[1]) {
				if (p[1] == '%')
					word[k++] = '%';
				else
					had_code =
					    true; /* %f %F %u %U %i %c %k and the deprecated ones */
				p += 2;
			} else if (*p == '\\' && p[1]) {
				word[k++] = p[1]; /* a lenient reading of an unquoted escape */
				p += 2;
			} else {
				word[k++] = *p++;
			}
		}
		word[k] = '\0';
		if (k == 0 && had_code && !quoted)
			continue;
		char *dup = strdup(word);
		if (!dup || launch_argv_push(&a, dup) < 0) {
			free(dup);
			free(s);
			free(word);
			launch_argv_free(a.v);
			err_set(e, ERR_INTERNAL, "out of memory");
			return NULL;
		}
	}
	free(s);
	free(word);
	if (!a.v) {
		err_set(e, ERR_INVALID, "Exec: no command in '%.200s'", exec ? exec : "");
		return NULL;
	}
	return a.v;
}

/* ---- finding the app ---- */

/* The executable file for prog (a path, or a name looked up in $PATH), into out. */
static bool launch_find_program(const char *prog, char *out, size_t size)
{
	if (!*prog)
		return false;
	if (strchr(prog, '/')) {
		struct stat st;
		if (stat(prog, &st) < 0 || !S_ISREG(st.st_mode) || access(prog, X_OK) < 0)
			return false;
		snprintf(out, size, "%s", prog);
		return true;
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		struct stat st;
		if (len > 0 && snprintf(out, size, "%.*s/%s", (int)len, p, prog) < (int)size &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return true;
		p += len + (colon ? 1 : 0);
	}
	return false;
}

/*
 * Looks for the desktop file id `rel` under dir/applications: the id's
 * dashes may stand for subdirectories ("kde-foo.desktop" can be
 * kde/foo.desktop), so each dash is tried both ways, up to a few.
 */
static bool launch_find_in_dir(const char *dir, char *rel, size_t from, char *out, size_t size,
			       int depth)
{
	struct stat st;
	if (snprintf(out, size, "%s/applications/%s", dir, rel) < (int)size &&
	    stat(out, &st) == 0 && S_ISREG(st.st_mode))
		return true;
	if (depth >= 4)
		return false;
	for (size_t i = from; rel[i]; i++) {
		if (rel[i] != '-')
			continue;
		rel[i] = '/';
		bool found = launch_find_in_dir(dir, rel, i + 1, out, size, depth + 1);
		rel[i] = '-';
		if (found)
			return true;
	}
	return false;
}

/* The .desktop file for id in $XDG_DATA_HOME then $XDG_DATA_DIRS, into out. */
static bool launch_find_desktop(const char *id, const char *home, char *out, size_t size)
{
	char rel[NAME_MAX + 1];
	size_t len = strlen(id);
	bool has_ext = len > 8 && strcmp(id + len - 8, ".desktop") == 0;
	if (len == 0 || strchr(id, '/') || strcmp(id, "..") == 0 ||
	    snprintf(rel, sizeof rel, "%s%s", id, has_ext ? "" : ".desktop") >= (int)sizeof rel)
		return false;

	char dir[PATH_MAX];
	const char *data_home = getenv("XDG_DATA_HOME");
	if (data_home && *data_home)
		snprintf(dir, sizeof dir, "%s", data_home);
	else if (home && *home)
		snprintf(dir, sizeof dir, "%s/.local/share", home);
	else
		dir[0] = '\0';
	if (dir[0] && launch_find_in_dir(dir, rel, 0, out, size, 0))
		return true;

	const char *dirs = getenv("XDG_DATA_DIRS");
	if (!dirs || !*dirs)
		dirs = "/usr/local/share:/usr/share";
	for (const char *p = dirs; *p;) {
		const char *colon = strchr(p, ':');
		size_t l = colon ? (size_t)(colon - p) : strlen(p);
		if (l > 0 && l < sizeof dir) {
			snprintf(dir, sizeof dir, "%.*s", (int)l, p);
			if (launch_find_in_dir(dir, rel, 0, out, size, 0))
				return true;
		}
		p += l + (colon ? 1 : 0);
	}
	return false;
}

/* What a .desktop file says about how to run it. */
struct launch_entry {
	char *exec;    /* Exec value, malloc'd, NULL if none */
	char *path;    /* Path value (working directory), malloc'd, NULL if none */
	bool terminal; /* Terminal=true */
	bool hidden;   /* Hidden=true: the entry counts as deleted */
	bool is_app;   /* Type=Application (or no Type) */
};

static void launch_entry_free(struct launch_entry *en)
{
	free(en->exec);
	free(en->path);
}

/* Reads the [Desktop Entry] group of a .desktop file. */
static int launch_read_entry(const char *file, struct launch_entry *en, struct err *e)
{
	memset(en, 0, sizeof *en);
	en->is_app = true;
	FILE *f = fopen(file, "re");
	if (!f)
		return err_set(e, ERR_NOT_FOUND, "cannot read %s: %s", file, strerror(errno));
	char line[8192];
	bool in_entry = false;
	size_t total = 0;
	while (fgets(line, sizeof line, f) && (total += strlen(line)) < LAUNCH_MAX_DESKTOP_FILE) {
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '[') {
			in_entry = strcmp(line, "[Desktop Entry]") == 0;
			continue;
		}
		if (!in_entry || line[0] == '#')
			continue;
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		char *key_end = eq;
		while (key_end > line && (key_end[-1] == ' ' || key_end[-1] == '\t'))
			key_end--;
		*key_end = '\0';
		char *value = eq + 1;
		while (*value == ' ' || *value == '\t')
			value++;
		if (strcmp(line, "Exec") == 0 && !en->exec) {
			en->exec = strdup(value);
		} else if (strcmp(line, "Path") == 0 && !en->path && *value) {
			en->path = launch_unescape_string(value);
		} else if (strcmp(line, "Terminal") == 0) {
			en->terminal = strcmp(value, "true") == 0;
		} else if (strcmp(line, "Hidden") == 0) {
			en->hidden = strcmp(value, "true") == 0;
		} else if (strcmp(line, "Type") == 0) {
			en->is_app = strcmp(value, "Application") == 0;
		}
	}
	fclose(f);
	return 0;
}

/*
 * The command for the app: argv (malloc'd) and the executable's path, from
 * a .desktop file or a program of that name, plus the working directory a
 * .desktop file asks for (*cwd, malloc'd or NULL).
 */
static int launch_resolve(const struct launch_opts *o, char ***argv_out, char *exe, size_t size,
			  char **cwd, struct err *e)
{
	*argv_out = NULL;
	*cwd = NULL;
	const char *app = o->app;
	if (!app || !*app)
		return err_param(e, "app",
				 "app: empty; give a .desktop id such as "
				 "'xfce4-terminal' or a program name");
	char file[PATH_MAX];
	struct launch_argv a = {0};
	char **base = NULL;
	size_t len = strlen(app);
	bool desktop_path = app[0] == '/' && len > 8 && strcmp(app + len - 8, ".desktop") == 0 &&
			    access(app, R_OK) == 0;
	if (desktop_path ||
	    (!strpbrk(app, "/ \t") && launch_find_desktop(app, o->as.home, file, sizeof file))) {
		if (desktop_path)
			snprintf(file, sizeof file, "%s", app);
		struct launch_entry en;
		if (launch_read_entry(file, &en, e) < 0)
			return -1;
		if (en.hidden || !en.is_app || !en.exec) {
			launch_entry_free(&en);
			return err_set_param(e, ERR_NOT_FOUND, "app",
					     "app: %s is not a launchable application (%s)", file,
					     en.hidden	  ? "Hidden=true"
					     : !en.is_app ? "its Type is not Application"
							  : "it has no Exec line");
		}
		struct err pe = {0};
		base = launch_exec_argv(en.exec, &pe);
		if (!base) {
			launch_entry_free(&en);
			return err_param(e, "app", "app: %s has a bad Exec line: %s", file,
					 pe.message);
		}
		*cwd = en.path;
		en.path = NULL;
		bool terminal = en.terminal;
		launch_entry_free(&en);
		if (terminal) {
			/* A terminal program: run it inside the desktop's terminal. */
			const char *term = launch_find_program("x-terminal-emulator", exe, size)
					       ? "x-terminal-emulator"
					       : "xterm";
			char *t = strdup(term), *dash_e = strdup("-e");
			if (!t || launch_argv_push(&a, t) < 0) {
				free(t);
				free(dash_e);
				goto oom;
			}
			if (!dash_e || launch_argv_push(&a, dash_e) < 0) {
				free(dash_e);
				goto oom;
			}
		}
	} else if (launch_find_program(app, exe, size)) {
		base = calloc(2, sizeof *base);
		if (!base || !(base[0] = strdup(app)))
			goto oom;
	} else if (strpbrk(app, " \t")) {
		/* A command line: split it like an Exec value. */
		struct err pe = {0};
		base = launch_exec_argv(app, &pe);
		if (!base)
			return err_param(e, "app", "app: %s", pe.message);
	}
	if (!base) {
		return err_set_param(
		    e, ERR_NOT_FOUND, "app",
		    "app: no application '%.200s': it is neither a .desktop id in "
		    "$XDG_DATA_HOME or $XDG_DATA_DIRS/applications nor a program in $PATH",
		    app);
	}
	for (char **p = base; *p; p++) {
		if (launch_argv_push(&a, *p) < 0)
			goto oom;
		*p = NULL;
	}
	free(base);
	base = NULL;
	for (const char *const *p = o->args; p && *p; p++) {
		char *dup = strdup(*p);
		if (!dup || launch_argv_push(&a, dup) < 0) {
			free(dup);
			goto oom;
		}
	}
	if (!launch_find_program(a.v[0], exe, size)) {
		err_set_param(e, ERR_NOT_FOUND, "app",
			      "app: '%.200s' runs '%.200s', which is not installed", app, a.v[0]);
		launch_argv_free(a.v);
		free(*cwd);
		*cwd = NULL;
		return -1;
	}
	*argv_out = a.v;
	return 0;
oom:
	launch_argv_free(base);
	launch_argv_free(a.v);
	free(*cwd);
	*cwd = NULL;
	return err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- starting it ---- */

/* The child's environment: envd's, with the user's (userenv.h) when it runs
 * as the user, and DISPLAY, HOME, USER, LOGNAME set (later ones win). */
static char **launch_environment(const struct launch_opts *o, const struct passwd *pw)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char *extra[USERENV_MAX + 4] = {0};
	size_t nextra = 0;
	bool ok = true;
	const char *const *uenv = pw ? userenv_entries() : NULL;
	for (size_t i = 0; uenv && uenv[i] && nextra < USERENV_MAX; i++)
		ok &= (extra[nextra++] = strdup(uenv[i])) != NULL;
	char **env = calloc(n + nextra + 5, sizeof *env);
	if (!env) {
		for (size_t j = 0; j < nextra; j++)
			free(extra[j]);
		return NULL;
	}
	size_t k = 0;
	if (o->display)
		ok &= asprintf(&extra[nextra++], "DISPLAY=%s", o->display) >= 0;
	if (o->as.home)
		ok &= asprintf(&extra[nextra++], "HOME=%s", o->as.home) >= 0;
	if (pw) {
		ok &= asprintf(&extra[nextra++], "USER=%s", pw->pw_name) >= 0;
		ok &= asprintf(&extra[nextra++], "LOGNAME=%s", pw->pw_name) >= 0;
	}
	for (size_t i = 0; i < n; i++) {
		bool replaced = false;
		for (size_t j = 0; j < nextra && !replaced; j++) {
			size_t kl = extra[j] ? strcspn(extra[j], "=") + 1 : 0;
			replaced = kl && strncmp(environ[i], extra[j], kl) == 0;
		}
		if (!replaced && ok && !(env[k++] = strdup(environ[i])))
			ok = false;
	}
	for (size_t j = 0; j < nextra; j++) {
		bool later = false; /* a later entry sets the same variable */
		size_t kl = extra[j] ? strcspn(extra[j], "=") + 1 : 0;
		for (size_t m = j + 1; m < nextra && !later; m++)
			later = kl && extra[m] && strncmp(extra[m], extra[j], kl) == 0;
		if (ok && extra[j] && !later)
			env[k++] = extra[j];
		else
			free(extra[j]);
	}
	if (!ok) {
		launch_argv_free(env);
		return NULL;
	}
	return env;
}

/* What the pipe carries: the app's pid, or where it failed before exec. */
enum launch_stage { LAUNCH_PID = 1, LAUNCH_FORK, LAUNCH_IDENTITY, LAUNCH_EXEC };

struct launch_msg {
	int stage;
	int err;
	pid_t pid;
};

/* Runs in the app's process between fork and exec: async-signal-safe only. */
static void launch_child(int fd, const char *exe, char **argv, char **envp,
			 const struct launch_opts *o, const gid_t *groups, int ngroups,
			 const char *cwd)
{
	struct launch_msg m = {0, 0, 0};
	setsid();
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	}
	if (o->as.uid != (uid_t)-1) {
		if (setgroups((size_t)ngroups, groups) < 0 || setgid(o->as.gid) < 0 ||
		    setuid(o->as.uid) < 0) {
			m.stage = LAUNCH_IDENTITY;
			m.err = errno;
			(void)!write(fd, &m, sizeof m);
			_exit(127);
		}
	}
	if (!cwd || chdir(cwd) < 0)
		(void)!chdir("/");
	/* envd's other descriptors (sockets, the X connection) must not leak. */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int i = 3; i < 1024; i++)
			if (i != fd)
				fcntl(i, F_SETFD, FD_CLOEXEC);
	execve(exe, argv, envp);
	m.stage = LAUNCH_EXEC;
	m.err = errno;
	(void)!write(fd, &m, sizeof m);
	_exit(127);
}

/* Reads one message, waiting until the deadline; 0 on end of file. */
static ssize_t launch_read_msg(int fd, struct launch_msg *m, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - clock_now_ms();
		if (left <= 0)
			return -1;
		struct pollfd pfd = {fd, POLLIN, 0};
		int pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		ssize_t r = read(fd, m, sizeof *m);
		if (r < 0 && errno == EINTR)
			continue;
		return r;
	}
}

int launch_app(const struct launch_opts *o, pid_t *pid, struct err *e)
{
	*pid = 0;
	char exe[PATH_MAX];
	char **argv, *cwd;
	if (launch_resolve(o, &argv, exe, sizeof exe, &cwd, e) < 0)
		return -1;

	struct passwd pwbuf, *pw = NULL;
	char pwstore[4096];
	gid_t groups[LAUNCH_MAX_GROUPS];
	int ngroups = 0;
	if (o->as.uid != (uid_t)-1) {
		getpwuid_r(o->as.uid, &pwbuf, pwstore, sizeof pwstore, &pw);
		ngroups = LAUNCH_MAX_GROUPS;
		if (!pw || getgrouplist(pw->pw_name, o->as.gid, groups, &ngroups) < 0) {
			groups[0] = o->as.gid;
			ngroups = 1;
		}
	}
	const char *dir = cwd ? cwd : o->as.home ? o->as.home : getenv("HOME");
	char **envp = launch_environment(o, pw);
	int fds[2] = {-1, -1};
	if (!envp || pipe2(fds, O_CLOEXEC) < 0) {
		int saved = errno;
		launch_argv_free(argv);
		launch_argv_free(envp);
		free(cwd);
		return err_set(e, ERR_INTERNAL, "cannot prepare to start %s: %s", exe,
			       envp ? strerror(saved) : "out of memory");
	}
	pid_t mid = fork();
	if (mid == 0) {
		/* The intermediate: fork the app, tell envd its pid, and leave. */
		pid_t app = fork();
		if (app == 0)
			launch_child(fds[1], exe, argv, envp, o, groups, ngroups, dir);
		struct launch_msg m = {app > 0 ? LAUNCH_PID : LAUNCH_FORK, app > 0 ? 0 : errno,
				       app};
		(void)!write(fds[1], &m, sizeof m);
		_exit(0);
	}
	int fork_errno = errno;
	close(fds[1]);
	launch_argv_free(argv);
	launch_argv_free(envp);
	free(cwd);
	if (mid < 0) {
		close(fds[0]);
		return err_set(e, ERR_INTERNAL, "cannot start %s: fork: %s", exe,
			       strerror(fork_errno));
	}
	while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
		;

	int64_t deadline = clock_now_ms() + LAUNCH_EXEC_TIMEOUT_MS;
	/* Two writers share the pipe: the intermediate (the pid) and the app
	 * (only if it fails before exec). Their messages arrive in either
	 * order; end of file means both are done, and the app has exec'd. */
	struct launch_msg got = {0, 0, 0}, fail = {0, 0, 0};
	ssize_t r;
	for (;;) {
		struct launch_msg m;
		r = launch_read_msg(fds[0], &m, deadline);
		if (r != (ssize_t)sizeof m)
			break;
		if (m.stage == LAUNCH_PID)
			got = m;
		else if (!fail.stage)
			fail = m;
	}
	int rc = 0;
	if (fail.stage == LAUNCH_FORK || (r == 0 && got.stage != LAUNCH_PID)) {
		rc = err_set(e, ERR_INTERNAL, "cannot start %s: fork: %s", exe,
			     fail.stage ? strerror(fail.err) : "no answer");
	} else if (fail.stage == LAUNCH_EXEC) {
		rc = err_set_param(e,
				   fail.err == ENOENT	? ERR_NOT_FOUND
				   : fail.err == EACCES ? ERR_FORBIDDEN
							: ERR_INTERNAL,
				   "app", "app: cannot run %s: %s", exe, strerror(fail.err));
	} else if (fail.stage == LAUNCH_IDENTITY) {
		rc = err_set(e, ERR_INTERNAL, "cannot switch to uid %u for %s: %s",
			     (unsigned)o->as.uid, exe, strerror(fail.err));
	} else if (r < 0) {
		rc = err_set(e, ERR_TIMEOUT, "%s did not start within %d s", exe,
			     LAUNCH_EXEC_TIMEOUT_MS / 1000);
	} else {
		*pid = got.pid;
	}
	close(fds[0]);
	return rc;
}
