/*
 * screen capture against real Xvfb servers started by the test: a 24-bit
 * one, a 16-bit one (5-6-5 masks, so the mask-driven conversion is used) and
 * one without MIT-SHM (the XGetImage fallback). A known pattern is drawn on
 * the root window; PNGs are decoded back with libpng and JPEGs with
 * libturbojpeg, and pixels are compared with what was drawn.
 *
 * The pattern on a 640x480 root:
 *   (0,0)-(320,240)     red             (320,0)-(640,240)   1-px checkerboard
 *   (0,240)-(320,480)   (12, 34, 56)    (320,240)-(480,480) blue, (480,..) green
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <png.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/Xrandr.h>

#include "x11/desk-internal.h"
#include "x11/screen.h"

#define W 640
#define H 480

struct rgb {
	int r, g, b;
};

static const struct rgb RED = {255, 0, 0}, BLACK = {0, 0, 0}, WHITE = {255, 255, 255},
			NAVY = {12, 34, 56}, BLUE = {0, 0, 255}, GREEN = {0, 255, 0};

struct fixture {
	pid_t xvfb;
	char display[32];
	Display *dpy; /* the test's own connection, for drawing */
	struct desk *desk;
	int bits[3]; /* channel widths of the visual, to predict quantization */
	bool shm;    /* the server offers MIT-SHM */
};

/* ---- Xvfb and the pattern ---------------------------------------------- */

static int xvfb_start(struct fixture *f, int depth, bool shm)
{
	int fds[2];
	if (pipe(fds) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		char fd[16], screen[32];
		snprintf(fd, sizeof fd, "%d", fds[1]);
		snprintf(screen, sizeof screen, "%dx%dx%d", W, H, depth);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		if (shm)
			execlp("Xvfb", "Xvfb", "-displayfd", fd, "-screen", "0", screen,
			       "-nolisten", "tcp", "+extension", "RANDR", (char *)NULL);
		else
			execlp("Xvfb", "Xvfb", "-displayfd", fd, "-screen", "0", screen,
			       "-nolisten", "tcp", "+extension", "RANDR", "-extension", "MIT-SHM",
			       (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char num[16] = "";
	ssize_t n = 0, r;
	while (n < (ssize_t)sizeof num - 1 && (r = read(fds[0], num + n, 1)) == 1 && num[n] != '\n')
		n++;
	close(fds[0]);
	num[n] = 0;
	f->xvfb = pid;
	if (n == 0)
		return -1;
	snprintf(f->display, sizeof f->display, ":%s", num);
	return 0;
}

static unsigned long alloc_pixel(Display *dpy, struct rgb c)
{
	XColor xc = {.red = (unsigned short)(c.r * 257),
		     .green = (unsigned short)(c.g * 257),
		     .blue = (unsigned short)(c.b * 257),
		     .flags = DoRed | DoGreen | DoBlue};
	XAllocColor(dpy, DefaultColormap(dpy, DefaultScreen(dpy)), &xc);
	return xc.pixel;
}

static void fill(Display *dpy, Drawable dr, GC gc, struct rgb c, int x, int y, int w, int h)
{
	XSetForeground(dpy, gc, alloc_pixel(dpy, c));
	XFillRectangle(dpy, dr, gc, x, y, (unsigned)w, (unsigned)h);
}

static void draw_pattern(struct fixture *f)
{
	Display *dpy = f->dpy;
	Window root = DefaultRootWindow(dpy);
	GC gc = XCreateGC(dpy, root, 0, NULL);
	fill(dpy, root, gc, RED, 0, 0, 320, 240);
	fill(dpy, root, gc, NAVY, 0, 240, 320, 240);
	fill(dpy, root, gc, BLUE, 320, 240, 160, 240);
	fill(dpy, root, gc, GREEN, 480, 240, 160, 240);
	/* checkerboard: black where x + y is even */
	Pixmap tile = XCreatePixmap(dpy, root, 2, 2, (unsigned)DefaultDepth(dpy, 0));
	fill(dpy, tile, gc, WHITE, 0, 0, 2, 2);
	fill(dpy, tile, gc, BLACK, 0, 0, 1, 1);
	fill(dpy, tile, gc, BLACK, 1, 1, 1, 1);
	XSetTile(dpy, gc, tile);
	XSetFillStyle(dpy, gc, FillTiled);
	XSetTSOrigin(dpy, gc, 0, 0);
	XFillRectangle(dpy, root, gc, 320, 0, 320, 240);
	XFreePixmap(dpy, tile);
	XFreeGC(dpy, gc);
	XSync(dpy, False);
}

/* The drawn colour at (x, y) of the root. */
static struct rgb pattern_at(int x, int y)
{
	if (y < 240)
		return x < 320 ? RED : ((x + y) % 2 ? WHITE : BLACK);
	return x < 320 ? NAVY : x < 480 ? BLUE : GREEN;
}

/* A colour as the visual stores it and screen.c widens it back to 8 bits. */
static struct rgb quantize(const struct fixture *f, struct rgb c)
{
	int *ch[3] = {&c.r, &c.g, &c.b};
	for (int i = 0; i < 3; i++) {
		int bits = f->bits[i];
		if (bits >= 8)
			continue;
		unsigned max = (1u << bits) - 1, v = (unsigned)*ch[i] >> (8 - bits);
		*ch[i] = (int)((v * 255 + max / 2) / max);
	}
	return c;
}

static int mask_bits(unsigned long m)
{
	int n = 0;
	for (; m; m >>= 1)
		n += (int)(m & 1);
	return n;
}

static int fixture_setup(void **state, int depth, bool shm)
{
	struct fixture *f = calloc(1, sizeof *f);
	if (!f || xvfb_start(f, depth, shm) < 0)
		return -1;
	f->shm = shm;
	f->dpy = XOpenDisplay(f->display);
	if (!f->dpy)
		return -1;
	Visual *v = DefaultVisual(f->dpy, 0);
	f->bits[0] = mask_bits(v->red_mask);
	f->bits[1] = mask_bits(v->green_mask);
	f->bits[2] = mask_bits(v->blue_mask);
	draw_pattern(f);
	struct err e;
	f->desk = desk_open(f->display, &e);
	if (!f->desk) {
		fprintf(stderr, "desk_open: %s\n", e.message);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup_24(void **state)
{
	return fixture_setup(state, 24, true);
}

static int setup_16(void **state)
{
	return fixture_setup(state, 16, true);
}

static int setup_noshm(void **state)
{
	return fixture_setup(state, 24, false);
}

static int fixture_teardown(void **state)
{
	struct fixture *f = *state;
	if (!f)
		return 0;
	desk_close(f->desk);
	if (f->dpy)
		XCloseDisplay(f->dpy);
	if (f->xvfb > 0) {
		kill(f->xvfb, SIGTERM);
		waitpid(f->xvfb, NULL, 0);
	}
	free(f);
	return 0;
}

/* ---- decoding ---------------------------------------------------------- */

struct decoded {
	unsigned char *px; /* packed RGB */
	int w, h;
};

static void decode_png(const struct screen_image *img, struct decoded *out)
{
	png_image pi;
	memset(&pi, 0, sizeof pi);
	pi.version = PNG_IMAGE_VERSION;
	assert_true(png_image_begin_read_from_memory(&pi, img->data, img->len));
	pi.format = PNG_FORMAT_RGB;
	out->px = malloc(PNG_IMAGE_SIZE(pi));
	assert_non_null(out->px);
	assert_true(png_image_finish_read(&pi, NULL, out->px, 0, NULL));
	out->w = (int)pi.width;
	out->h = (int)pi.height;
}

static void decode_jpeg(const struct screen_image *img, struct decoded *out)
{
	tjhandle tj = tjInitDecompress();
	int w, h, samp, cs;
	assert_int_equal(tjDecompressHeader3(tj, img->data, img->len, &w, &h, &samp, &cs), 0);
	out->px = malloc((size_t)w * (size_t)h * 3);
	assert_int_equal(tjDecompress2(tj, img->data, img->len, out->px, w, 0, h, TJPF_RGB, 0), 0);
	tjDestroy(tj);
	out->w = w;
	out->h = h;
}

static struct rgb decoded_at(const struct decoded *d, int x, int y)
{
	const unsigned char *p = d->px + ((size_t)y * (size_t)d->w + (size_t)x) * 3;
	return (struct rgb){p[0], p[1], p[2]};
}

static void assert_rgb_near(struct rgb got, struct rgb want, int tol, int x, int y)
{
	if (abs(got.r - want.r) > tol || abs(got.g - want.g) > tol || abs(got.b - want.b) > tol)
		fail_msg("pixel (%d,%d) is (%d,%d,%d), want (%d,%d,%d) +-%d", x, y, got.r, got.g,
			 got.b, want.r, want.g, want.b, tol);
}

static void capture(struct fixture *f, struct screen_opts o, struct screen_image *img)
{
	struct err e;
	if (screen_capture(f->desk, &o, img, &e) < 0)
		fail_msg("screen_capture: %s", e.message);
}

/* ---- tests ------------------------------------------------------------- */

static void test_png_full_screen_is_exact(void **state)
{
	struct fixture *f = *state;
	struct screen_image img;
	capture(f, (struct screen_opts){.format = SCREEN_PNG}, &img);
	assert_string_equal(img.mime, "image/png");
	assert_int_equal(img.width, W);
	assert_int_equal(img.height, H);
	assert_true(img.scale == 1.0);
	struct decoded d;
	decode_png(&img, &d);
	assert_int_equal(d.w, W);
	assert_int_equal(d.h, H);
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			assert_rgb_near(decoded_at(&d, x, y), quantize(f, pattern_at(x, y)), 0, x,
					y);
	free(d.px);
	free(img.data);
	/* The shared image is used where the server offers MIT-SHM. */
	assert_int_equal(f->desk->shm_ok, f->shm);
}

static void test_png_region_is_exact(void **state)
{
	struct fixture *f = *state;
	struct screen_image img;
	/* straddles all four quadrants; odd sizes and offsets */
	struct screen_opts o = {
	    .format = SCREEN_PNG, .region = true, .x = 301, .y = 221, .width = 37, .height = 41};
	capture(f, o, &img);
	assert_int_equal(img.width, 37);
	assert_int_equal(img.height, 41);
	struct decoded d;
	decode_png(&img, &d);
	for (int y = 0; y < d.h; y++)
		for (int x = 0; x < d.w; x++)
			assert_rgb_near(decoded_at(&d, x, y),
					quantize(f, pattern_at(o.x + x, o.y + y)), 0, x, y);
	free(d.px);
	free(img.data);

	/* A full-screen capture after a region one still sees everything. */
	capture(f, (struct screen_opts){.format = SCREEN_PNG}, &img);
	decode_png(&img, &d);
	assert_int_equal(d.w, W);
	assert_rgb_near(decoded_at(&d, 639, 479), quantize(f, GREEN), 0, 639, 479);
	free(d.px);
	free(img.data);
}

static void test_grab_rgb(void **state)
{
	struct fixture *f = *state;
	uint32_t *px;
	struct err e;
	assert_int_equal(screen_grab_rgb(f->desk, 318, 0, 4, 2, &px, &e), 0);
	for (int y = 0; y < 2; y++)
		for (int x = 0; x < 4; x++) {
			struct rgb want = quantize(f, pattern_at(318 + x, y));
			uint32_t v =
			    (uint32_t)want.r << 16 | (uint32_t)want.g << 8 | (uint32_t)want.b;
			assert_int_equal(px[y * 4 + x], v);
		}
	free(px);
}

static void test_downscale_averages_area(void **state)
{
	struct fixture *f = *state;
	struct screen_image img;
	struct decoded d;

	/* A 1-px checkerboard halved is uniform grey. */
	capture(f,
		(struct screen_opts){.format = SCREEN_PNG,
				     .region = true,
				     .x = 320,
				     .y = 0,
				     .width = 200,
				     .height = 100,
				     .max_width = 100},
		&img);
	assert_int_equal(img.width, 100);
	assert_int_equal(img.height, 50);
	assert_true(img.scale == 0.5);
	decode_png(&img, &d);
	for (int y = 0; y < d.h; y++)
		for (int x = 0; x < d.w; x++)
			assert_rgb_near(decoded_at(&d, x, y), (struct rgb){128, 128, 128}, 1, x, y);
	free(d.px);
	free(img.data);

	/* A flat area stays exactly flat at a fractional ratio (3:2). */
	capture(f,
		(struct screen_opts){.format = SCREEN_PNG,
				     .region = true,
				     .width = 300,
				     .height = 200,
				     .max_width = 200},
		&img);
	assert_int_equal(img.width, 200);
	assert_int_equal(img.height, 133);
	assert_true(img.scale > 0.6666 && img.scale < 0.6667);
	decode_png(&img, &d);
	for (int y = 0; y < d.h; y++)
		for (int x = 0; x < d.w; x++)
			assert_rgb_near(decoded_at(&d, x, y), quantize(f, RED), 0, x, y);
	free(d.px);
	free(img.data);

	/* 49 blue then 51 green pixels at 2.5:1: output 19 covers source
	 * [47.5, 50), i.e. 1.5 blue and 1 green: 60% blue, 40% green. */
	capture(f,
		(struct screen_opts){.format = SCREEN_PNG,
				     .region = true,
				     .x = 431,
				     .y = 300,
				     .width = 100,
				     .height = 10,
				     .max_width = 40},
		&img);
	assert_int_equal(img.width, 40);
	assert_int_equal(img.height, 4);
	decode_png(&img, &d);
	assert_rgb_near(decoded_at(&d, 18, 1), BLUE, 0, 18, 1);
	assert_rgb_near(decoded_at(&d, 19, 1), (struct rgb){0, 102, 153}, 1, 19, 1);
	assert_rgb_near(decoded_at(&d, 20, 1), GREEN, 0, 20, 1);
	free(d.px);
	free(img.data);

	/* max_height limits when it is the tighter bound; aspect is kept. */
	capture(f, (struct screen_opts){.format = SCREEN_PNG, .max_width = 600, .max_height = 120},
		&img);
	assert_int_equal(img.width, 160);
	assert_int_equal(img.height, 120);
	assert_true(img.scale == 0.25);
	free(img.data);

	/* Limits larger than the capture do not upscale. */
	capture(f, (struct screen_opts){.format = SCREEN_PNG, .max_width = 5000}, &img);
	assert_int_equal(img.width, W);
	assert_true(img.scale == 1.0);
	decode_png(&img, &d);
	assert_rgb_near(decoded_at(&d, 0, 0), quantize(f, RED), 0, 0, 0);
	free(d.px);
	free(img.data);
}

static void test_jpeg(void **state)
{
	struct fixture *f = *state;
	struct screen_image img;
	for (int q = 50; q <= 95; q += 45) {
		capture(f, (struct screen_opts){.format = SCREEN_JPEG, .quality = q}, &img);
		assert_string_equal(img.mime, "image/jpeg");
		assert_true(img.len > 2 && img.data[0] == 0xff && img.data[1] == 0xd8);
		struct decoded d;
		decode_jpeg(&img, &d);
		assert_int_equal(d.w, W);
		assert_int_equal(d.h, H);
		/* well inside flat areas, away from 8x8/16x16 block edges */
		assert_rgb_near(decoded_at(&d, 100, 100), quantize(f, RED), 12, 100, 100);
		assert_rgb_near(decoded_at(&d, 100, 400), quantize(f, NAVY), 12, 100, 400);
		assert_rgb_near(decoded_at(&d, 400, 400), quantize(f, BLUE), 12, 400, 400);
		assert_rgb_near(decoded_at(&d, 560, 400), quantize(f, GREEN), 12, 560, 400);
		free(d.px);
		free(img.data);
	}
	capture(f, (struct screen_opts){.format = SCREEN_JPEG, .quality = 80, .max_width = 320},
		&img);
	assert_int_equal(img.width, 320);
	assert_int_equal(img.height, 240);
	free(img.data);
}

static void expect_param(struct fixture *f, struct screen_opts o, const char *param)
{
	struct screen_image img;
	struct err e;
	err_clear(&e);
	assert_int_equal(screen_capture(f->desk, &o, &img, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, param);
	assert_non_null(strstr(e.message, param));
}

static void test_bad_input(void **state)
{
	struct fixture *f = *state;
	struct screen_opts r = {.format = SCREEN_PNG, .region = true, .width = 10, .height = 10};
	struct screen_opts o = r;
	o.x = -1;
	expect_param(f, o, "x");
	o = r;
	o.y = H;
	expect_param(f, o, "y");
	o = r;
	o.x = W - 5;
	expect_param(f, o, "width");
	o = r;
	o.height = H + 1;
	expect_param(f, o, "height");
	o = r;
	o.width = 0;
	expect_param(f, o, "width");
	o = r;
	o.x = 2147483600; /* no overflow in x + width */
	expect_param(f, o, "x");
	expect_param(f, (struct screen_opts){.format = SCREEN_JPEG, .quality = 0}, "quality");
	expect_param(f, (struct screen_opts){.format = SCREEN_JPEG, .quality = 101}, "quality");
	expect_param(f, (struct screen_opts){.format = SCREEN_PNG, .max_width = -1}, "max_width");
	expect_param(f, (struct screen_opts){.format = SCREEN_PNG, .max_height = -3}, "max_height");
	uint32_t *px;
	struct err e;
	assert_int_equal(screen_grab_rgb(f->desk, 0, 0, W + 1, 1, &px, &e), -1);
	assert_string_equal(e.param, "width");
}

/* The shared image follows the screen when RANDR shrinks it. */
static void test_screen_resize(void **state)
{
	struct fixture *f = *state;
	struct screen_image img;
	capture(f, (struct screen_opts){.format = SCREEN_PNG}, &img);
	free(img.data);
	/* The CRTC scans out 640x480: switch it off, then shrink the screen. */
	Window root = DefaultRootWindow(f->dpy);
	XRRScreenResources *res = XRRGetScreenResources(f->dpy, root);
	assert_non_null(res);
	for (int i = 0; i < res->ncrtc; i++)
		XRRSetCrtcConfig(f->dpy, res, res->crtcs[i], CurrentTime, 0, 0, None, RR_Rotate_0,
				 NULL, 0);
	XRRFreeScreenResources(res);
	XRRSetScreenSize(f->dpy, root, 320, 240, 85, 64);
	XSync(f->dpy, False);
	int w = 0, h = 0;
	struct err e;
	assert_int_equal(desk_screen_size(f->desk, &w, &h, &e), 0);
	if (w != 320)
		skip();	 /* this Xvfb cannot resize */
	draw_pattern(f); /* the root lost its drawing; now it is all red */
	capture(f, (struct screen_opts){.format = SCREEN_PNG}, &img);
	assert_int_equal(img.width, 320);
	assert_int_equal(img.height, 240);
	struct decoded d;
	decode_png(&img, &d);
	assert_rgb_near(decoded_at(&d, 10, 10), quantize(f, RED), 0, 10, 10);
	assert_rgb_near(decoded_at(&d, 319, 239), quantize(f, RED), 0, 319, 239);
	free(d.px);
	free(img.data);
	expect_param(f,
		     (struct screen_opts){
			 .format = SCREEN_PNG, .region = true, .x = 400, .width = 1, .height = 1},
		     "x");
}

#define SCREEN_TESTS(setup)                                                                        \
	{                                                                                          \
		cmocka_unit_test_setup_teardown(test_png_full_screen_is_exact, setup,              \
						fixture_teardown),                                 \
		    cmocka_unit_test_setup_teardown(test_png_region_is_exact, setup,               \
						    fixture_teardown),                             \
		    cmocka_unit_test_setup_teardown(test_grab_rgb, setup, fixture_teardown),       \
		    cmocka_unit_test_setup_teardown(test_downscale_averages_area, setup,           \
						    fixture_teardown),                             \
		    cmocka_unit_test_setup_teardown(test_jpeg, setup, fixture_teardown),           \
		    cmocka_unit_test_setup_teardown(test_bad_input, setup, fixture_teardown),      \
		    cmocka_unit_test_setup_teardown(test_screen_resize, setup, fixture_teardown),  \
	}

int main(void)
{
	const struct CMUnitTest depth24[] = SCREEN_TESTS(setup_24);
	const struct CMUnitTest depth16[] = SCREEN_TESTS(setup_16);
	const struct CMUnitTest noshm[] = SCREEN_TESTS(setup_noshm);
	int failed =
	    cmocka_run_group_tests_name("screen, depth 24 with MIT-SHM", depth24, NULL, NULL);
	failed += cmocka_run_group_tests_name("screen, depth 16", depth16, NULL, NULL);
	failed +=
	    cmocka_run_group_tests_name("screen, depth 24 without MIT-SHM", noshm, NULL, NULL);
	return failed ? 1 : 0;
}
