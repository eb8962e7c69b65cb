#include "sizes.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct size sizes[] = {
    {"small", "desktop", 2000, 4096, 20480, 4096, 4},
    {"medium", "desktop", 4000, 8192, 51200, 8192, 8},
    {"large", "desktop", 8000, 16384, 102400, 16384, 16},
    {"xs", "sandbox", 500, 512, 5120, 512, 1},
    {"sm", "sandbox", 1000, 1024, 10240, 1024, 2},
    {"md", "sandbox", 2000, 2048, 20480, 2048, 4},
    {"lg", "sandbox", 4000, 4096, 40960, 4096, 8},
    {"xl", "sandbox", 8000, 8192, 81920, 8192, 16},
};

const struct size *size_find(const char *kind, const char *name, struct err *e)
{
	if (!name)
		name = strcmp(kind, "desktop") == 0 ? "small" : "sm";
	char list[128] = "";
	size_t used = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		if (strcmp(sizes[i].kind, kind) != 0)
			continue;
		if (strcasecmp(sizes[i].name, name) == 0)
			return &sizes[i];
		used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
					 sizes[i].name);
	}
	err_param(e, "size", "size: '%.40s' is not a %s size; valid: %s", name, kind, list);
	return NULL;
}
