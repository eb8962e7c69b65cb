/*
 * userenv: the user's environment from the image (see userenv.h).
 */
#include "userenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *userenv[USERENV_MAX + 1];

void userenv_load(const char *path)
{
	FILE *f = fopen(path ? path : USERENV_FILE, "re");
	if (!f)
		return;
	char line[4096];
	size_t n = 0;
	while (n < USERENV_MAX && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		const char *eq = strchr(line, '=');
		if (line[0] == '#' || !eq || eq == line)
			continue;
		char *copy = strdup(line);
		if (copy)
			userenv[n++] = copy;
	}
	fclose(f);
}

const char *const *userenv_entries(void)
{
	return userenv;
}
