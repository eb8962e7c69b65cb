/*
 * Clipboard actions: get_clipboard and set_clipboard on the CLIPBOARD
 * selection (x11/clipboard.h). After set_clipboard envd owns the selection
 * and serves the text to any application that pastes, until another client
 * copies something.
 */
#include <stdlib.h>
#include <string.h>

#include "action.h"
#include "clipboard.h"
#include "params.h"

#define CLIPBOARD_TIMEOUT_DEFAULT_MS 2000
#define CLIPBOARD_TIMEOUT_MAX_MS     60000

static int clipboard_need(struct envd *env, struct err *e)
{
	if (env->clipboard)
		return 0;
	return err_set(e, ERR_CONFLICT,
		       "the clipboard is not available: envd could not open its clipboard "
		       "connection to the X display (see envd's log)");
}

int act_get_clipboard(struct envd *env, const json_t *params, struct action_reply *reply,
		      struct err *e)
{
	long long timeout = CLIPBOARD_TIMEOUT_DEFAULT_MS;
	if (param_int(params, "timeout_ms", 1, CLIPBOARD_TIMEOUT_MAX_MS, &timeout, e) < 0)
		return -1;
	if (clipboard_need(env, e) < 0)
		return -1;
	char *text;
	size_t len;
	if (clipboard_get(env->clipboard, (int)timeout, &text, &len, e) < 0)
		return -1;
	reply->json = json_pack("{s:s%}", "text", text, len);
	free(text);
	if (!reply->json)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}

int act_set_clipboard(struct envd *env, const json_t *params, struct action_reply *reply,
		      struct err *e)
{
	const char *s;
	if (param_need_str(params, "text", &s, e) < 0)
		return -1;
	/* The length from JSON, not strlen: the text may hold NUL characters. */
	size_t len = json_string_length(json_object_get(params, "text"));
	if (clipboard_need(env, e) < 0)
		return -1;
	if (clipboard_set(env->clipboard, s, len, e) < 0)
		return -1;
	reply->json = json_pack("{s:b,s:I}", "ok", 1, "length", (json_int_t)len);
	if (!reply->json)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}
