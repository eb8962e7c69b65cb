/*
 * output: what a person reads — aligned tables, key/value listings, the
 * progress line — and the API's JSON for --json.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "utf8.h"

void out_json(const json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
	if (s)
		puts(s);
	free(s);
}

char *out_scalar(const json_t *v)
{
	char buf[64];
	if (!v)
		return strdup("");
	switch (json_typeof(v)) {
	case JSON_STRING:
		return strdup(json_string_value(v));
	case JSON_INTEGER:
		snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return strdup(buf);
	case JSON_REAL:
		snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
		return strdup(buf);
	case JSON_TRUE:
		return strdup("true");
	case JSON_FALSE:
		return strdup("false");
	case JSON_NULL:
		return strdup("");
	default:
		return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	}
}

/* Width in characters, not bytes, so names with accents still line up. */
static size_t out_width(const char *s)
{
	size_t n = 0, len = strlen(s);
	while (len) {
		unsigned long cp;
		size_t k = utf8_decode(s, len, &cp);
		if (!k)
			k = 1;
		s += k;
		len -= k;
		n++;
	}
	return n;
}

static void out_padded(const char *s, size_t width)
{
	fputs(s, stdout);
	for (size_t w = out_width(s); w < width; w++)
		putchar(' ');
}

void out_kv(const json_t *obj)
{
	size_t width = 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)obj, k, v)
	{
		if (strlen(k) > width)
			width = strlen(k);
	}
	json_object_foreach((json_t *)obj, k, v)
	{
		char *s = out_scalar(v);
		out_padded(k, width + 2);
		puts(s ? s : "");
		free(s);
	}
}

struct table {
	int ncols, nrows;
	char **cells; /* row-major, the headers first */
};

struct table *table_new(int ncols, const char *const *headers)
{
	struct table *t = calloc(1, sizeof *t);
	if (t) {
		t->ncols = ncols;
		table_add(t, headers);
	}
	return t;
}

void table_add(struct table *t, const char *const *cells)
{
	char **n =
	    t ? realloc(t->cells, (size_t)(t->nrows + 1) * (size_t)t->ncols * sizeof *n) : NULL;
	if (!n)
		return;
	t->cells = n;
	for (int c = 0; c < t->ncols; c++)
		n[t->nrows * t->ncols + c] = strdup(cells[c] ? cells[c] : "");
	t->nrows++;
}

void table_print(struct table *t)
{
	if (!t)
		return;
	size_t *width = calloc((size_t)t->ncols, sizeof *width);
	for (int i = 0; width && i < t->nrows * t->ncols; i++) {
		size_t w = t->cells[i] ? out_width(t->cells[i]) : 0;
		if (w > width[i % t->ncols])
			width[i % t->ncols] = w;
	}
	for (int r = 0; width && r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			if (c == t->ncols - 1)
				fputs(s ? s : "", stdout);
			else
				out_padded(s ? s : "", width[c] + 2);
		}
		putchar('\n');
	}
	for (int i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(width);
	free(t);
}

void progress_show(struct cli *cli, const char *fmt, ...)
{
	if (!cli->tty)
		return;
	va_list ap;
	va_start(ap, fmt);
	fputs("\r\033[K", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

void progress_clear(struct cli *cli)
{
	if (cli->tty) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}

void out_bytes(char *buf, size_t len, uint64_t n)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* Length of the next word: up to a space outside brackets, so "[--x N]"
 * stays on one line. */
static size_t out_word(const char *s)
{
	int depth = 0;
	size_t n = 0;
	for (; s[n] && (s[n] != ' ' || depth > 0); n++)
		depth += s[n] == '[' ? 1 : s[n] == ']' ? -1 : 0;
	return n;
}

void out_wrap(FILE *f, const char *text, int indent)
{
	int col = 0;
	bool first = true; /* of its line */
	while (*text) {
		size_t word = out_word(text);
		if (!first && col + 1 + (int)word > 79) {
			fprintf(f, "\n%*s", indent, "");
			col = indent;
			first = true;
		}
		if (!first) {
			fputc(' ', f);
			col++;
		}
		fwrite(text, 1, word, f);
		col += (int)word;
		first = false;
		text += word;
		while (*text == ' ')
			text++;
	}
	fputc('\n', f);
}
