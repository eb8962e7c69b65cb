/*
 * a11y: the accessibility tree through AT-SPI (libatspi).
 *
 * GTK, Qt and Firefox publish their widgets on the accessibility bus, a
 * D-Bus bus of its own started by at-spi-bus-launcher and advertised through
 * the AT_SPI_BUS property of the X root window and the session bus's
 * org.a11y.Bus service. The registry (at-spi2-registryd) lists the
 * applications; every node is then asked over D-Bus for its role, name,
 * description, states, extents, actions and children.
 *
 * libatspi is not thread-safe and keeps process-wide state, so every use of
 * it here is under one mutex. It can be initialised once per process, and a
 * failed atspi_init() leaves it unusable (a later call would g_error() and
 * abort), so the bus is looked for first, a failed init is undone with
 * atspi_exit() and retried on the next call, and only a successful one is
 * kept. No GLib main loop runs in envd: libatspi's caches are then bypassed
 * (every property is read live, which is what a snapshot wants), and the
 * signals it subscribes to are dispatched by iterating the default main
 * context before each walk so they do not pile up in the D-Bus connection.
 *
 * A node that vanishes mid-walk (a closed window, a defunct object) or that
 * answers with an error is skipped, never fatal; an application that stops
 * answering is cut short after one timeout rather than costing one timeout
 * per node.
 */
#include "a11y.h"
#include "clock.h"
#include "identity.h"

#include <atspi/atspi.h>
#include <dbus/dbus.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <X11/Xatom.h>
#include <X11/Xlib.h>

#define A11Y_CALL_TIMEOUT_MS	3000  /* one D-Bus call to an application */
#define A11Y_STARTUP_TIMEOUT_MS 5000  /* the same, for an application that just started */
#define A11Y_WALK_DEADLINE_MS	45000 /* the whole tree; beyond it, truncated */
#define A11Y_HUNG_MS		1000  /* a failed call this slow means the app hangs */
#define A11Y_MAX_ACTIONS	32

#define A11Y_HOWTO                                                                                 \
	"start the accessibility bus (/usr/libexec/at-spi-bus-launcher --launch-immediately) "     \
	"in the desktop session with a D-Bus session bus (DBUS_SESSION_BUS_ADDRESS) and launch "   \
	"applications with GNOME_ACCESSIBILITY=1"

static pthread_mutex_t a11y_lock = PTHREAD_MUTEX_INITIALIZER;
static bool a11y_ready;		/* atspi_init() succeeded */
static bool a11y_status_done;	/* org.a11y.Status IsEnabled was set */
static GEnumClass *a11y_states; /* AtspiStateType, for the state names */

struct a11y_walk {
	const struct a11y_opts *o;
	int nodes;
	bool truncated;
	int64_t deadline;
	bool app_hung; /* the current application stopped answering */
};

/* ---- finding the bus ------------------------------------------------------------ */

/* True if the X root window carries AT_SPI_BUS (set by at-spi-bus-launcher). */
static bool a11y_x_root_has_bus(void)
{
	const char *name = getenv("DISPLAY");
	if (!name || !*name)
		return false;
	Display *dpy = XOpenDisplay(name);
	if (!dpy)
		return false;
	Atom prop = XInternAtom(dpy, "AT_SPI_BUS", True);
	bool found = false;
	if (prop != None) {
		Atom type;
		int fmt;
		unsigned long n, after;
		unsigned char *data = NULL;
		if (XGetWindowProperty(dpy, DefaultRootWindow(dpy), prop, 0, 1024, False, XA_STRING,
				       &type, &fmt, &n, &after, &data) == Success)
			found = type != None && n > 0;
		XFree(data);
	}
	XCloseDisplay(dpy);
	return found;
}

/*
 * Whether libatspi has any way to find the bus. Without one atspi_init()
 * would, through libdbus, try to autolaunch a session bus via X11.
 */
static bool a11y_bus_advertised(void)
{
	const char *v = getenv("AT_SPI_BUS_ADDRESS");
	if (v && *v)
		return true;
	if (a11y_x_root_has_bus())
		return true;
	v = getenv("DBUS_SESSION_BUS_ADDRESS");
	return v && *v;
}

/*
 * Asks the bus launcher to switch accessibility on (org.a11y.Status
 * IsEnabled = true): applications started from now on (Firefox among them)
 * then publish their trees even without GNOME_ACCESSIBILITY=1. Best effort.
 */
static void a11y_enable_status(void)
{
	const char *v = getenv("DBUS_SESSION_BUS_ADDRESS");
	if (!v || !*v)
		return;
	DBusError de;
	dbus_error_init(&de);
	DBusConnection *bus = dbus_bus_get_private(DBUS_BUS_SESSION, &de);
	if (!bus) {
		dbus_error_free(&de);
		return;
	}
	dbus_connection_set_exit_on_disconnect(bus, FALSE);
	DBusMessage *m = dbus_message_new_method_call("org.a11y.Bus", "/org/a11y/bus",
						      "org.freedesktop.DBus.Properties", "Set");
	if (m) {
		const char *iface = "org.a11y.Status", *prop = "IsEnabled";
		dbus_bool_t yes = TRUE;
		DBusMessageIter it, var;
		dbus_message_iter_init_append(m, &it);
		dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &iface);
		dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &prop);
		if (dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "b", &var)) {
			dbus_message_iter_append_basic(&var, DBUS_TYPE_BOOLEAN, &yes);
			dbus_message_iter_close_container(&it, &var);
		}
		DBusMessage *r = dbus_connection_send_with_reply_and_block(bus, m, 2000, &de);
		if (r)
			dbus_message_unref(r);
		dbus_message_unref(m);
	}
	dbus_error_free(&de);
	dbus_connection_close(bus);
	dbus_connection_unref(bus);
}

static int a11y_unavailable(struct err *e, const char *why)
{
	return err_set(e, ERR_UNAVAILABLE,
		       "the accessibility bus (AT-SPI) is absent or not answering: %s; to enable "
		       "it, " A11Y_HOWTO,
		       why);
}

/* Connects libatspi to the bus once (lock held). */
static int a11y_init_locked(struct err *e)
{
	if (a11y_ready)
		return 0;
	if (!a11y_bus_advertised())
		return a11y_unavailable(e,
					"there is no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS "
					"is unset) and the X root window has no AT_SPI_BUS "
					"property");
	int rc = atspi_init();
	if (rc != 0 && rc != 1) {
		atspi_exit(); /* lets the next call try again */
		return a11y_unavailable(e, "libatspi found no bus address (AT_SPI_BUS_ADDRESS, the "
					   "AT_SPI_BUS root window property, org.a11y.Bus on the "
					   "session bus) or could not connect to it");
	}
	atspi_set_timeout(A11Y_CALL_TIMEOUT_MS, A11Y_STARTUP_TIMEOUT_MS);
	a11y_states = g_type_class_ref(ATSPI_TYPE_STATE_TYPE);
	a11y_ready = true;
	return 0;
}

/* Runs libatspi's pending D-Bus work (signals it subscribed to, replies). */
static void a11y_dispatch(void)
{
	for (int i = 0; i < 10000 && g_main_context_iteration(NULL, FALSE); i++) {
	}
}

/* ---- one node ----------------------------------------------------------------- */

/* Sets key to a JSON string from a GLib string (freed), "" when NULL. */
static void a11y_set_str(json_t *o, const char *key, gchar *s)
{
	json_t *v = json_string(s ? s : "");
	json_object_set_new(o, key, v ? v : json_string(""));
	g_free(s);
}

/* Notes a failed call; one that took a timeout marks the application hung. */
static void a11y_call_failed(struct a11y_walk *w, GError **gerr, int64_t started)
{
	g_clear_error(gerr);
	if (clock_now_ms() - started >= A11Y_HUNG_MS)
		w->app_hung = true;
}

static json_t *a11y_states_json(AtspiAccessible *acc)
{
	json_t *arr = json_array();
	AtspiStateSet *set = atspi_accessible_get_state_set(acc);
	if (!set)
		return arr;
	GArray *states = atspi_state_set_get_states(set);
	for (guint i = 0; states && i < states->len; i++) {
		AtspiStateType st = g_array_index(states, AtspiStateType, i);
		GEnumValue *v = a11y_states ? g_enum_get_value(a11y_states, (gint)st) : NULL;
		if (v && v->value_nick)
			json_array_append_new(arr, json_string(v->value_nick));
	}
	if (states)
		g_array_free(states, TRUE);
	g_object_unref(set);
	return arr;
}

static void a11y_bounds(AtspiAccessible *acc, json_t *node, struct a11y_walk *w)
{
	AtspiComponent *comp = atspi_accessible_get_component_iface(acc);
	if (!comp)
		return;
	GError *gerr = NULL;
	int64_t t0 = clock_now_ms();
	AtspiRect *r = atspi_component_get_extents(comp, ATSPI_COORD_TYPE_SCREEN, &gerr);
	if (gerr)
		a11y_call_failed(w, &gerr, t0);
	else if (r && r->width > 0 && r->height > 0)
		json_object_set_new(node, "bounds",
				    json_pack("{s:i,s:i,s:i,s:i}", "x", r->x, "y", r->y, "width",
					      r->width, "height", r->height));
	g_free(r);
	g_object_unref(comp);
}

static json_t *a11y_actions_json(AtspiAccessible *acc, struct a11y_walk *w)
{
	json_t *arr = json_array();
	AtspiAction *act = atspi_accessible_get_action_iface(acc);
	if (!act)
		return arr;
	GError *gerr = NULL;
	int64_t t0 = clock_now_ms();
	int n = atspi_action_get_n_actions(act, &gerr);
	if (gerr) {
		a11y_call_failed(w, &gerr, t0);
		n = 0;
	}
	for (int i = 0; i < n && i < A11Y_MAX_ACTIONS && !w->app_hung; i++) {
		t0 = clock_now_ms();
		gchar *name = atspi_action_get_action_name(act, i, &gerr);
		if (gerr)
			a11y_call_failed(w, &gerr, t0);
		else if (name && *name)
			json_array_append_new(arr, json_string(name));
		g_free(name);
	}
	g_object_unref(act);
	return arr;
}

/*
 * The JSON node for acc and its subtree, or NULL if acc cannot be read (gone,
 * defunct) or the walk is over its limits (w->truncated set).
 */
static json_t *a11y_node(AtspiAccessible *acc, int depth, struct a11y_walk *w)
{
	if (w->app_hung)
		return NULL;
	if (w->nodes >= w->o->max_nodes || clock_now_ms() >= w->deadline) {
		w->truncated = true;
		return NULL;
	}
	GError *gerr = NULL;
	int64_t t0 = clock_now_ms();
	gchar *role = atspi_accessible_get_role_name(acc, &gerr);
	if (gerr) {
		g_free(role);
		a11y_call_failed(w, &gerr, t0);
		return NULL;
	}
	w->nodes++;
	json_t *node = json_object();
	a11y_set_str(node, "role", role);
	t0 = clock_now_ms();
	gchar *s = atspi_accessible_get_name(acc, &gerr);
	if (gerr)
		a11y_call_failed(w, &gerr, t0);
	a11y_set_str(node, "name", s);
	t0 = clock_now_ms();
	s = atspi_accessible_get_description(acc, &gerr);
	if (gerr)
		a11y_call_failed(w, &gerr, t0);
	a11y_set_str(node, "description", s);
	json_object_set_new(node, "states", a11y_states_json(acc));
	if (!w->app_hung)
		a11y_bounds(acc, node, w);
	json_object_set_new(node, "actions",
			    w->app_hung ? json_array() : a11y_actions_json(acc, w));

	json_t *children = json_array();
	json_object_set_new(node, "children", children);
	if (depth >= w->o->max_depth || w->app_hung)
		return node;
	t0 = clock_now_ms();
	int n = atspi_accessible_get_child_count(acc, &gerr);
	if (gerr) {
		a11y_call_failed(w, &gerr, t0);
		n = 0;
	}
	for (int i = 0; i < n && !w->app_hung; i++) {
		if (w->nodes >= w->o->max_nodes) {
			w->truncated = true;
			break;
		}
		t0 = clock_now_ms();
		AtspiAccessible *child = atspi_accessible_get_child_at_index(acc, i, &gerr);
		if (gerr || !child) {
			a11y_call_failed(w, &gerr, t0);
			if (child)
				g_object_unref(child);
			continue;
		}
		json_t *c = a11y_node(child, depth + 1, w);
		g_object_unref(child);
		if (c)
			json_array_append_new(children, c);
		if (w->truncated)
			break;
	}
	return node;
}

/* ---- the tree ------------------------------------------------------------------ */

static int a11y_tree_locked(const struct a11y_opts *o, json_t **out, struct err *e)
{
	if (a11y_init_locked(e) < 0)
		return -1;
	if (!a11y_status_done) {
		a11y_enable_status();
		a11y_status_done = true;
	}
	a11y_dispatch();

	AtspiAccessible *desktop = atspi_get_desktop(0);
	if (!desktop)
		return a11y_unavailable(e, "the accessibility registry has no desktop");
	GError *gerr = NULL;
	int napps = atspi_accessible_get_child_count(desktop, &gerr);
	if (napps < 0 || gerr) {
		char why[300];
		snprintf(why, sizeof why,
			 "the accessibility registry (at-spi2-registryd) does not answer (%s)",
			 gerr && gerr->message ? gerr->message : "no reply");
		g_clear_error(&gerr);
		g_object_unref(desktop);
		return a11y_unavailable(e, why);
	}

	struct a11y_walk w = {.o = o, .deadline = clock_now_ms() + A11Y_WALK_DEADLINE_MS};
	json_t *apps = json_array();
	for (int i = 0; i < napps && !w.truncated; i++) {
		AtspiAccessible *app = atspi_accessible_get_child_at_index(desktop, i, &gerr);
		if (gerr || !app) {
			g_clear_error(&gerr);
			if (app)
				g_object_unref(app);
			continue;
		}
		if (o->app && *o->app) {
			gchar *name = atspi_accessible_get_name(app, &gerr);
			bool match = !gerr && name && strcasestr(name, o->app);
			g_clear_error(&gerr);
			g_free(name);
			if (!match) {
				g_object_unref(app);
				continue;
			}
		}
		w.app_hung = false;
		json_t *node = a11y_node(app, 0, &w);
		if (node && w.app_hung)
			json_object_set_new(node, "error",
					    json_string("the application stopped answering; its "
							"tree is incomplete"));
		g_object_unref(app);
		if (node)
			json_array_append_new(apps, node);
	}
	g_object_unref(desktop);
	a11y_dispatch();

	*out = json_pack("{s:o,s:b}", "applications", apps, "truncated", w.truncated);
	if (!*out)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}

int a11y_tree(const struct a11y_opts *opts, json_t **out, struct err *e)
{
	struct a11y_opts o = *opts;
	if (o.max_depth <= 0)
		o.max_depth = 10;
	if (o.max_nodes <= 0)
		o.max_nodes = 5000;
	pthread_mutex_lock(&a11y_lock);
	struct identity_saved as;
	int rc = identity_enter(o.uid, o.gid, &as, e);
	if (rc == 0) {
		rc = a11y_tree_locked(&o, out, e);
		identity_leave(&as);
	}
	pthread_mutex_unlock(&a11y_lock);
	return rc;
}
