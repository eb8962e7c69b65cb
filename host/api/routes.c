/*
 * routes: the generated route table (routes-gen.inc, from spec/) and a
 * segment matcher over it.
 */
#include "routes.h"

#include <string.h>

struct route_def {
	const char *pattern; /* "/v1/computers/{}/files": {} is one segment */
	unsigned methods;    /* M(HTTPD_GET) | ... */
	bool rest;	     /* the last {} takes the rest of the path */
};

#define M(m) (1u << (m))

#include "routes-gen.inc"

/* Whether path matches pattern, segment by segment; as the router's
 * api_segments(), leading slashes and one trailing slash do not count. */
static bool routes_match(const char *pattern, const char *path, bool rest)
{
	const char *p = pattern, *s = path;
	while (*p == '/')
		p++;
	while (*s == '/')
		s++;
	while (*p && *s) {
		if (p[0] == '{' && p[1] == '}') {
			size_t len = strcspn(s, "/");
			if (len == 0)
				return false;
			p += 2;
			if (rest && !*p)
				return true;
			s += len;
			continue;
		}
		if (*p != *s)
			return false;
		p++, s++;
	}
	return !*p && (!*s || (s[0] == '/' && !s[1]));
}

int routes_find(enum httpd_method m, const char *path)
{
	for (size_t i = 0; i < sizeof route_defs / sizeof route_defs[0]; i++)
		if ((route_defs[i].methods & M(m)) &&
		    routes_match(route_defs[i].pattern, path, route_defs[i].rest))
			return (int)i;
	return -1;
}

bool routes_has(enum httpd_method m, const char *path)
{
	return routes_find(m, path) >= 0;
}

int routes_count(void)
{
	return (int)(sizeof route_defs / sizeof route_defs[0]);
}

const char *routes_pattern(int i)
{
	return i >= 0 && i < routes_count() ? route_defs[i].pattern : "other";
}

const unsigned char *routes_openapi(size_t *len)
{
	*len = sizeof openapi_json;
	return openapi_json;
}
