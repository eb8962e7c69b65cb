// The embed page in real Chromium against a fake gateway (fake_gateway.mjs):
// it connects, draws what the RFB server sends, scales to its iframe, sends
// clicks and keys (and none when view-only), says "denied" when the gateway
// refuses the token, and reconnects while the gateway lets it.
//
// Run: node --test tests/browser/test_*.mjs   (node >= 20; Debian chromium;
// webclient/node_modules from webclient/build). $CUBICLE_WEBCLIENT names a
// built OUT_DIR to test; without it the page is built into a temp folder.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
	browserLaunch,
	embedCanvasGeometry,
	embedInHostPage,
	embedState,
	embedWaitPixel,
	embedWaitState,
	webclientBuilt,
} from "./browser.mjs";
import { fakeGatewayStart } from "./fake_gateway.mjs";

const ORANGE = [0xd0, 0x40, 0x10];
const GREEN = [0x10, 0xc0, 0x70];
const KEYSYM_a = 0x61;

describe("embed page", () => {
	let built;
	let browser;

	before(async () => {
		built = webclientBuilt();
		browser = await browserLaunch();
	});

	after(async () => {
		await browser?.close();
		built?.cleanup();
	});

	// A fresh gateway and browser page per test; fails the test on an
	// uncaught page error or a Content-Security-Policy violation, and on
	// any protocol error the fake RFB server saw.
	async function setup(t, gwOpts = {}) {
		const gw = await fakeGatewayStart(built.dir, { colour: ORANGE, ...gwOpts });
		const context = await browser.newContext({ viewport: { width: 1024, height: 768 } });
		const page = await context.newPage();
		const problems = [];
		page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
		page.on("console", (m) => {
			if (/Content Security Policy|Refused to/i.test(m.text())) {
				problems.push(`console: ${m.text()}`);
			}
		});
		t.after(async () => {
			await context.close();
			await gw.stop();
		});
		const check = () => {
			assert.deepEqual(problems, []);
			for (const s of gw.sessions) {
				assert.equal(s.error, null);
			}
		};
		return { gw, page, check };
	}

	test("in an iframe: connects, shows the desktop's colour, fits and centres the canvas", async (t) => {
		const { gw, page, check } = await setup(t);
		const frame = await embedInHostPage(page, gw.embedUrl(), { width: 800, height: 400 });
		await embedWaitState(frame, "connected");
		await embedWaitPixel(frame, ORANGE);

		const s = gw.session;
		assert.equal(s.of("clientinit")[0].shared, 1, "noVNC asks for a shared session");
		const g = await embedCanvasGeometry(frame);
		assert.deepEqual([g.width, g.height], [64, 48]);
		// Scaled to fit 800x400 keeping 4:3: 400 high, 533 wide, centred.
		assert.ok(Math.abs(g.cssHeight - 400) <= 1, `canvas height ${g.cssHeight}`);
		assert.ok(Math.abs(g.cssWidth - 533.33) <= 1, `canvas width ${g.cssWidth}`);
		const centre = await frame.evaluate(() => {
			const r = document.querySelector("#screen canvas").getBoundingClientRect();
			return [r.left + r.width / 2, r.top + r.height / 2];
		});
		assert.ok(Math.abs(centre[0] - 400) <= 1 && Math.abs(centre[1] - 200) <= 1, `canvas centre ${centre}`);

		// A change on the desktop reaches the canvas.
		s.setColour(GREEN);
		await embedWaitPixel(frame, GREEN);
		check();
	});

	test("a click on the canvas focuses it and sends a PointerEvent; typing sends KeyEvents", async (t) => {
		const { gw, page, check } = await setup(t);
		const frame = await embedInHostPage(page, gw.embedUrl(), { width: 640, height: 480 });
		await embedWaitState(frame, "connected");
		await embedWaitPixel(frame, ORANGE);

		await frame.locator("#screen canvas").click();
		const s = gw.session;
		// The canvas is 64x48 shown at 640x480: its centre is (32, 24).
		const down = await gw.waitFor(
			() => s.of("pointer").find((e) => e.mask === 1),
			"a PointerEvent with the left button down",
		);
		assert.ok(Math.abs(down.x - 32) <= 1 && Math.abs(down.y - 24) <= 1, `click at ${down.x},${down.y}`);
		await gw.waitFor(
			() => s.of("pointer").some((e) => e.mask === 0 && e.seq > down.seq),
			"a PointerEvent with the button released",
		);
		assert.equal(await frame.evaluate(() => document.activeElement?.tagName), "CANVAS");
		const cursor = await frame.evaluate(() => getComputedStyle(document.querySelector("#screen canvas")).cursor);
		assert.match(cursor, /^url\("data:image\/png/, "noVNC draws the remote cursor (a data: image the CSP allows)");

		await page.keyboard.press("a");
		await gw.waitFor(
			() => s.of("key").some((e) => e.keysym === KEYSYM_a && e.down),
			"a KeyEvent for 'a' down",
		);
		await gw.waitFor(
			() => s.of("key").some((e) => e.keysym === KEYSYM_a && !e.down),
			"a KeyEvent for 'a' up",
		);
		check();
	});

	test("view_only=1: clicks and keys send nothing and the canvas takes no focus", async (t) => {
		const { gw, page, check } = await setup(t);
		const frame = await embedInHostPage(page, gw.embedUrl({ view_only: "1" }));
		await embedWaitState(frame, "connected");
		await embedWaitPixel(frame, ORANGE);
		assert.ok(await frame.evaluate(() => document.body.classList.contains("view-only")));
		const cursor = await frame.evaluate(() => getComputedStyle(document.querySelector("#screen canvas")).cursor);
		assert.equal(cursor, "default", "no remote cursor shape over a view-only desktop");

		await frame.locator("#screen canvas").click();
		await frame.locator("#screen canvas").click({ button: "right" });
		await page.keyboard.press("a");
		await page.mouse.wheel(0, 200);

		// Barrier: the desktop changes and the client asks for more after
		// drawing it; any input it had sent would have arrived before that.
		const s = gw.session;
		s.setColour(GREEN);
		await embedWaitPixel(frame, GREEN);
		await s.barrierAfterColour(GREEN);
		assert.deepEqual(s.of("pointer"), []);
		assert.deepEqual(s.of("key"), []);
		assert.notEqual(await frame.evaluate(() => document.activeElement?.tagName), "CANVAS");
		check();
	});

	test("a 401 on the upgrade shows denied, with a clear message", async (t) => {
		const { gw, page, check } = await setup(t);
		gw.token = "tok-good";
		const frame = await embedInHostPage(page, gw.embedUrl({ token: "tok-forged" }));
		await embedWaitState(frame, "denied");
		const st = await embedState(frame);
		assert.match(st.status, /access denied or link expired/i);
		assert.equal(gw.sessions.length, 0);
		assert.ok(gw.upgrades >= 1);
		check();
	});

	test("a token for another computer (403) shows denied", async (t) => {
		const { gw, page, check } = await setup(t);
		gw.computerId = "c-other";
		await page.goto(`${gw.origin}/embed/c-test?token=${gw.token}`);
		await embedWaitState(page, "denied");
		assert.equal(gw.sessions.length, 0);
		check();
	});

	test("a link without a token shows denied without connecting", async (t) => {
		const { gw, page, check } = await setup(t);
		await page.goto(`${gw.origin}/embed/c-test`);
		await embedWaitState(page, "denied");
		assert.match((await embedState(page)).status, /incomplete/);
		assert.equal(gw.upgrades, 0);
		check();
	});

	test("a dropped stream reconnects; once the token has expired, denied", async (t) => {
		const { gw, page, check } = await setup(t);
		await page.goto(gw.embedUrl());
		await embedWaitState(page, "connected");
		await embedWaitPixel(page, ORANGE);

		gw.colour = GREEN; // what the next connection will show
		gw.session.ws.terminate();
		await gw.waitFor(() => gw.sessions.length === 2, "a second connection");
		await embedWaitState(page, "connected");
		await embedWaitPixel(page, GREEN);

		gw.policy = "deny"; // the token has expired
		gw.session.close(1000, "bye");
		await embedWaitState(page, "denied");
		assert.equal(gw.sessions.length, 2);
		check();
	});

	test("a server that cannot be reached is retried, not denied", async (t) => {
		const { gw, page, check } = await setup(t);
		gw.policy = "drop";
		await page.goto(gw.embedUrl());
		await page.waitForFunction(
			() =>
				document.body.dataset.state === "disconnected" &&
				/cannot reach/i.test(document.getElementById("status").textContent),
		);
		const seen = gw.upgrades;
		await gw.waitFor(() => gw.upgrades > seen, "a retry");
		gw.policy = "accept";
		await embedWaitState(page, "connected");
		await embedWaitPixel(page, ORANGE);
		check();
	});

	test("a WebSocket that fails while the token is good is retried, not denied", async (t) => {
		const { gw, page, check } = await setup(t);
		gw.policy = "dropws";
		await page.goto(gw.embedUrl());
		await page.waitForFunction(
			() =>
				document.body.dataset.state === "disconnected" &&
				/did not open \(the server answered 426\)/.test(document.getElementById("status").textContent),
		);
		gw.policy = "accept";
		await embedWaitState(page, "connected");
		await embedWaitPixel(page, ORANGE);
		check();
	});

	test("a close with code 4403 (revoked) ends the stream for good", async (t) => {
		const { gw, page, check } = await setup(t);
		await page.goto(gw.embedUrl());
		await embedWaitState(page, "connected");
		gw.session.close(4403, "stream revoked");
		await embedWaitState(page, "denied");
		assert.match((await embedState(page)).status, /stream revoked/);
		check();
	});
});
