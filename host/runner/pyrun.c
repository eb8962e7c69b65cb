/*
 * cubicle-pyrun: the Python supervisor of the code runner.
 *
 *   cubicle-pyrun [--uid N] [--gid N] [--pool N]     (control socket on fd 3)
 *
 * Debian's CPython 3.11, embedded: started once, the standard library
 * modules people use for data, text, math and dates imported, then
 * zygote_serve() forks a sandboxed child per run (zygote.h). The child
 * inherits the warm interpreter, so a run costs a fork that happened before
 * the request and the code itself. Started by cubicled (runner.c) as root
 * with a clean environment; runs as --uid (default 65534).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runproto.h"
#include "zygote.h"

/* Imported before the first fork: every run finds them loaded (and those
 * backed by a shared library need no file the sandbox cannot read). */
static const char preload[] =
    "import json, csv, re, datetime, math, cmath, statistics, decimal, fractions, "
    "itertools, collections, collections.abc, functools, operator, heapq, bisect, "
    "random, string, textwrap, unicodedata, difflib, hashlib, hmac, base64, binascii, "
    "struct, array, copy, pprint, io, typing, dataclasses, enum, numbers, time, "
    "calendar, zoneinfo, uuid, secrets, html, html.parser, urllib.parse, "
    "xml.etree.ElementTree, sqlite3, zlib, gzip, bz2, lzma, shlex, fnmatch, argparse, "
    "traceback, warnings, contextlib, abc, types, weakref, queue, graphlib, locale, "
    "asyncio, ipaddress, email, email.message, codecs, encodings.idna, "
    "encodings.latin_1, encodings.ascii, "
    "tomllib, pathlib, glob, logging, reprlib, keyword, tokenize, ast, dis, inspect, "
    "quopri, colorsys, platform\n";

/* Runs the code as __main__ and says how it ended: (exit status, kind, message). */
static const char runner_src[] =
    "import sys as _s, traceback as _tb, builtins as _b, _sitebuiltins\n"
    "_b.exit = _sitebuiltins.Quitter('exit', 'Ctrl-D (i.e. EOF)')\n"
    "_b.quit = _sitebuiltins.Quitter('quit', 'Ctrl-D (i.e. EOF)')\n"
    "def _flush():\n"
    "    for f in (_s.stdout, _s.stderr, _s.__stdout__, _s.__stderr__):\n"
    "        try:\n"
    "            f.flush()\n"
    "        except BaseException:\n"
    "            pass\n"
    "_keep = []\n"
    "def run(src):\n"
    "    g = {'__name__': '__main__', '__builtins__': _b}\n"
    "    _keep.append(g)\n"
    "    try:\n"
    "        exec(compile(src, '<code>', 'exec'), g)\n"
    "        return (0, '', '')\n"
    "    except SystemExit as e:\n"
    "        c = e.code\n"
    "        if c is None:\n"
    "            return (0, '', '')\n"
    "        if isinstance(c, int):\n"
    "            return (c & 255, '', '')\n"
    "        try:\n"
    "            print(c, file=_s.stderr)\n"
    "        except BaseException:\n"
    "            pass\n"
    "        return (1, '', '')\n"
    "    except MemoryError:\n"
    "        return (1, 'M', 'MemoryError: the code ran out of memory')\n"
    "    except BaseException as e:\n"
    "        try:\n"
    "            _tb.print_exception(type(e), e, e.__traceback__.tb_next)\n"
    "            m = ''.join(_tb.format_exception_only(type(e), e)).strip()\n"
    "        except MemoryError:\n"
    "            return (1, 'M', 'MemoryError: the code ran out of memory')\n"
    "        except BaseException:\n"
    "            m = type(e).__name__\n"
    "        return (1, 'E', m)\n"
    "    finally:\n"
    "        _flush()\n";

static PyObject *run_fn;

static PyObject *reseed_fn;

/* In each sandboxed child, the one piece of the interpreter's after-fork
 * work a run needs: random's state (else every run draws the same
 * numbers). The rest of PyOS_AfterFork_Child (its at-fork hooks:
 * threading, logging, concurrent.futures re-making locks; the GIL and the
 * import lock re-made for the calling thread) exists for a parent with
 * other threads that may hold those locks; the zygote has one thread and
 * holds none of them when it forks, so the child's copy is already
 * consistent. Skipping it spares ~240 copy-on-write faults (~20 ms of CPU
 * in this VM) per sandbox (docs/code-runner.md). */
static void py_child(void)
{
	if (reseed_fn)
		Py_XDECREF(PyObject_CallNoArgs(reseed_fn));
	PyErr_Clear();
}

/* The verdict record of zygote.h, then the end: stdout and stderr are
 * flushed by the runner; closing them and the verdict pipe lets the hub
 * answer before this process is torn down. */
static void py_finish(int fd, char kind, int status, const char *msg)
{
	char buf[RUN_MSG_MAX];
	int n = snprintf(buf, sizeof buf, "%c%03d%s", kind, status & 255, msg ? msg : "");
	if (n >= (int)sizeof buf)
		n = sizeof buf - 1;
	close(1);
	close(2);
	if (n > 0)
		(void)!write(fd, buf, (size_t)n);
	close(fd);
	/* The hub measures this process and kills it (an exit now would
	 * take its memory figures with it). */
	for (;;)
		poll(NULL, 0, -1);
}

/* Run in each sandboxed child before its code arrives: the pages a run
 * typically writes (the allocator's pools, frames, the compiler's state)
 * are copied from the zygote now, not on the request path (a copy-on-write
 * fault costs tens of microseconds in a VM). Nothing of it is visible to
 * the code: it runs in a dictionary of its own and prints nowhere. */
static const char warmup_src[] =
    "import io, json, re, math\n"
    "b = io.StringIO()\n"
    "print('x', 1, 2.5, [1, 'a'], {'k': (1, None)}, file=b)\n"
    "d = json.loads(json.dumps({'a': [1, 2.5, 'x', None, True]}))\n"
    "s = sum(i * i for i in range(200)) + len(re.findall(r'\\w+', 'a b c'))\n"
    "f = f'{s:,} {math.pi:.3f}'.split()\n"
    "class C:\n    pass\n"
    "del b, d, s, f, C\n";

static void py_prepare(void)
{
	PyObject *warm = PyUnicode_FromString(warmup_src);
	if (warm)
		Py_XDECREF(PyObject_CallOneArg(run_fn, warm));
	Py_XDECREF(warm);
	PyErr_Clear();
}

static void py_run(int code_fd, int status_fd)
{
	static char code[RUN_CODE_MAX + 1];
	size_t n = 0;
	for (;;) {
		ssize_t r = read(code_fd, code + n, RUN_CODE_MAX - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == RUN_CODE_MAX)
			break;
	}
	close(code_fd);
	if (n == 0) /* no run came (the hub went away) */
		_exit(0);
	PyObject *src = PyUnicode_DecodeUTF8(code, (Py_ssize_t)n, "replace");
	PyObject *r = src ? PyObject_CallOneArg(run_fn, src) : NULL;
	if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 3) {
		int status = (int)PyLong_AsLong(PyTuple_GET_ITEM(r, 0));
		const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 1));
		const char *msg = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 2));
		py_finish(status_fd, kind && *kind ? kind[0] : '0', status, msg);
	}
	if (PyErr_ExceptionMatches(PyExc_MemoryError))
		py_finish(status_fd, 'M', 1, "MemoryError: the code ran out of memory");
	py_finish(status_fd, 'E', 1, "the code could not be run");
}

/* The threads of this process (py_child relies on there being one). */
static int threads(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void usage(void)
{
	fprintf(stderr, "usage: cubicle-pyrun [--uid N] [--gid N] [--pool N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct zygote_opts o = {.uid = 65534, .gid = 65534, .pool = 8};
	static const struct option longopts[] = {
	    {"uid", required_argument, NULL, 'u'},
	    {"gid", required_argument, NULL, 'g'},
	    {"pool", required_argument, NULL, 'p'},
	    {NULL, 0, NULL, 0},
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		char *end;
		long v = optarg ? strtol(optarg, &end, 10) : 0;
		if (!optarg || *end || v < 0 || v > INT_MAX)
			usage();
		if (ch == 'u')
			o.uid = (uid_t)v;
		else if (ch == 'g')
			o.gid = (gid_t)v;
		else if (ch == 'p' && v >= 1 && v <= 256)
			o.pool = (int)v;
		else
			usage();
	}
	char why[300];
	if (zygote_isolate(why, sizeof why) < 0 ||
	    zygote_split("cubicle-pyrun", why, sizeof why) < 0) {
		fprintf(stderr, "cubicle-pyrun: %s\n", why);
		return 1;
	}
	/* From here on, the zygote (this process became the hub). */
	clearenv();
	setenv("PATH", "/usr/bin:/bin", 1);
	setenv("LANG", "C.UTF-8", 1);
	setenv("TZ", "UTC", 1);
	setenv("HOME", "/nonexistent", 1);

	PyPreConfig pre;
	PyPreConfig_InitIsolatedConfig(&pre);
	pre.utf8_mode = 1;
	PyStatus s = Py_PreInitialize(&pre);
	if (PyStatus_Exception(s))
		Py_ExitStatusException(s);
	PyConfig c;
	PyConfig_InitIsolatedConfig(&c);
	c.site_import = 0;
	c.write_bytecode = 0;
	c.buffered_stdio = 1;
	c.install_signal_handlers = 1;
	s = PyConfig_SetString(&c, &c.program_name, L"python3");
	if (!PyStatus_Exception(s))
		s = Py_InitializeFromConfig(&c);
	PyConfig_Clear(&c);
	if (PyStatus_Exception(s))
		Py_ExitStatusException(s);
	if (PyRun_SimpleString(preload) != 0) {
		fprintf(stderr, "cubicle-pyrun: the standard library did not import\n");
		return 1;
	}
	PyObject *g = PyDict_New();
	PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins());
	PyObject *rr = g ? PyRun_String(runner_src, Py_file_input, g, g) : NULL;
	run_fn = rr ? PyDict_GetItemString(g, "run") : NULL;
	if (!run_fn) {
		PyErr_Print();
		return 1;
	}
	Py_INCREF(run_fn);
	Py_DECREF(rr);
	PyObject *rnd = PyImport_ImportModule("random");
	reseed_fn = rnd ? PyObject_GetAttrString(rnd, "seed") : NULL;
	Py_XDECREF(rnd);
	if (!reseed_fn) {
		PyErr_Print();
		return 1;
	}
	if (threads() != 1) {
		fprintf(stderr, "cubicle-pyrun: the zygote must have one thread (it has %d)\n",
			threads());
		return 1;
	}

	/* The code may read the standard library (imports not preloaded) and
	 * the time zone database, nothing else. */
	static char paths[16][PATH_MAX];
	static const char *readable[18];
	size_t k = 0;
	PyObject *sp = PySys_GetObject("path");
	for (Py_ssize_t i = 0; sp && i < PyList_Size(sp) && k < 16; i++) {
		const char *p = PyUnicode_AsUTF8(PyList_GetItem(sp, i));
		if (p && *p && realpath(p, paths[k]))
			readable[k] = paths[k], k++;
	}
	PyErr_Clear();
	readable[k++] = "/usr/share/zoneinfo";
	readable[k] = NULL;
	o.readable = readable;
	fflush(stdout);
	/* Collect once, then freeze: the collector never walks the zygote's
	 * objects in a child, so their pages stay shared (no copy-on-write). */
	PyRun_SimpleString("import sys, gc; sys.stdout.flush(); sys.stderr.flush(); "
			   "gc.collect(); gc.freeze()");

	struct zygote_lang l = {
	    .name = "cubicle-pyrun",
	    .after_fork_child = py_child,
	    .prepare = py_prepare,
	    .run = py_run,
	};
	zygote_serve(&l, &o);
	return 0;
}
