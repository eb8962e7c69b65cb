/*
 * libFuzzer harness for a template's recipe (host/core/template-recipe.c):
 * POST /v1/templates' body is tenant input, and its package names reach a
 * shell in the build's guest, its file paths the image.
 *
 * Input: a JSON text (the body). Checked, for every recipe the parser
 * accepts:
 *   - the name is an identifier, the base sandbox or desktop;
 *   - no package name holds a quote, a backslash, whitespace or a control
 *     byte (each is single-quoted into a command line), and none is a path,
 *     a URL or an option (no leading '-', no ':' and at most one '/', in an
 *     npm scope);
 *   - every file path is absolute, each part a name (no "", ".", ".."), no
 *     control byte, not under a directory mounted over at start;
 *   - the canonical text parses back into the same spec, and parsing it
 *     again gives the same text (the cache key is stable);
 * and for every recipe it refuses: an error that names a problem.
 */
#include <jansson.h>

#include "err.h"
#include "fuzz.h"
#include "template-internal.h"

static void check_words(const json_t *list, bool npm)
{
	size_t i;
	json_t *v;
	json_array_foreach(list, i, v)
	{
		const char *s = json_string_value(v);
		CHECK(s && *s && s[0] != '-');
		int slashes = 0;
		for (const char *p = s; *p; p++) {
			CHECK((unsigned char)*p > 0x20 && *p != 0x7f);
			CHECK(!strchr("'\"\\`$;&|(){}[] ", *p) || (*p == '[' || *p == ']'));
			CHECK(*p != ':' || !npm);
			slashes += *p == '/';
		}
		CHECK(slashes == 0 || (npm && slashes == 1 && s[0] == '@'));
	}
}

static void check_path(const char *p)
{
	static const char *const mounted[] = {"/proc", "/sys", "/dev", "/run", "/tmp", "/session"};
	CHECK(p[0] == '/');
	CHECK(!strstr(p, "//") && !strstr(p, "/./") && !strstr(p, "/../"));
	size_t n = strlen(p);
	CHECK(p[n - 1] != '/');
	CHECK(!(n >= 2 && strcmp(p + n - 2, "/.") == 0) &&
	      !(n >= 3 && strcmp(p + n - 3, "/..") == 0));
	for (const char *s = p; *s; s++)
		CHECK((unsigned char)*s >= 0x20 && *s != 0x7f);
	for (size_t i = 0; i < sizeof mounted / sizeof mounted[0]; i++) {
		size_t m = strlen(mounted[i]);
		CHECK(!(strncmp(p, mounted[i], m) == 0 && (p[m] == '/' || !p[m])));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (!body)
		return 0;
	struct tpl_recipe r;
	struct err e = {0};
	if (tpl_recipe_parse(body, NULL, &r, &e) < 0) {
		CHECK(e.code != ERR_OK && e.message[0]);
		CHECK(!r.spec && !r.canonical);
		json_decref(body);
		return 0;
	}
	CHECK(r.name[0] && strlen(r.name) < 64);
	for (const char *p = r.name; *p; p++)
		CHECK((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_');
	CHECK(strcmp(r.base, "sandbox") == 0 || strcmp(r.base, "desktop") == 0);
	CHECK(!r.builtin && !r.copy_from[0]);
	check_words(json_object_get(r.spec, "apt"), false);
	check_words(json_object_get(r.spec, "pip"), false);
	check_words(json_object_get(r.spec, "npm"), true);
	const char *path;
	json_t *v;
	json_object_foreach(json_object_get(r.spec, "files"), path, v)
	{
		check_path(path);
		CHECK(json_is_string(v));
	}
	/* The canonical text is the spec, and a fixed point. */
	json_t *back = json_loads(r.canonical, 0, NULL);
	CHECK(back && json_equal(back, r.spec));
	json_object_set_new(back, "name", json_string(r.name));
	struct tpl_recipe again;
	CHECK(tpl_recipe_parse(back, NULL, &again, &e) == 0);
	CHECK(strcmp(again.canonical, r.canonical) == 0);
	tpl_recipe_free(&again);
	json_decref(back);
	tpl_recipe_free(&r);
	json_decref(body);
	return 0;
}
