// Browser test tooling: Debian's Chromium driven headless by playwright-core,
// and the few helpers every embed test needs (build the page, put it in an
// iframe, wait for its state, read its canvas).
//
// playwright-core comes from webclient/node_modules (pinned in
// webclient/package-lock.json; `webclient/build` installs it). It never
// downloads a browser: it drives /usr/bin/chromium (Debian package
// `chromium`), or $CUBICLE_CHROMIUM. Each launch gets a fresh, empty
// profile: Playwright's launch() makes a new --user-data-dir in the temp
// folder and removes it on close (it refuses a --user-data-dir in args).
//
// The flags keep Chromium off the network (this machine has none but
// loopback) and quiet: no background fetches, component updates, sync or
// QUIC, no GPU, no sandbox (tests run as root).

import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
export const webclientDir = path.join(repoRoot, "webclient");

export const CHROMIUM = process.env.CUBICLE_CHROMIUM || "/usr/bin/chromium";
export const CHROMIUM_ARGS = [
	"--no-sandbox",
	"--disable-gpu",
	"--disable-background-networking",
	"--disable-component-update",
	"--disable-sync",
	"--no-first-run",
	"--disable-quic",
];

// How long a wait on a condition may take before the test fails. A bound
// so that a broken page fails instead of hanging, not a timing assertion.
export const WAIT_MS = 60000;

let playwrightModule = null;

// playwright-core, resolved from webclient/node_modules.
export function playwright() {
	if (playwrightModule) {
		return playwrightModule;
	}
	const require = createRequire(path.join(webclientDir, "package.json"));
	try {
		playwrightModule = require("playwright-core");
	} catch (e) {
		throw new Error(
			`playwright-core is not installed in ${webclientDir}/node_modules: ` +
				`run webclient/build OUT_DIR (it runs npm ci) (${e.message})`,
		);
	}
	return playwrightModule;
}

// Launches headless Chromium. Close it with `await browser.close()`.
export async function browserLaunch() {
	if (!existsSync(CHROMIUM)) {
		throw new Error(`${CHROMIUM} not found: apt-get install chromium (or set CUBICLE_CHROMIUM)`);
	}
	return playwright().chromium.launch({
		executablePath: CHROMIUM,
		headless: true,
		args: CHROMIUM_ARGS,
		timeout: 60000,
	});
}

// The built page: $CUBICLE_WEBCLIENT when set (an OUT_DIR of
// webclient/build), else a fresh build into a temporary folder. Returns
// { dir, cleanup() }.
export function webclientBuilt() {
	if (process.env.CUBICLE_WEBCLIENT) {
		return { dir: process.env.CUBICLE_WEBCLIENT, cleanup() {} };
	}
	const parent = mkdtempSync(path.join(os.tmpdir(), "cubicle-webclient-"));
	const dir = path.join(parent, "out");
	execFileSync(path.join(webclientDir, "build"), [dir], { stdio: ["ignore", "ignore", "inherit"] });
	return {
		dir,
		cleanup() {
			rmSync(parent, { recursive: true, force: true });
		},
	};
}

// The path under which embedInHostPage serves its host page. Nothing on
// the server answers it: the browser is handed the page by page.route().
// Loads url in page. Chromium aborts every request in flight with
// net::ERR_NETWORK_CHANGED when the host's addresses change, which the
// tests beside this one do (veths in namespaces of their own): a load
// that met that abort is loaded again, three times at most. Any other
// failure is the caller's.
export async function gotoSteady(page, url) {
	for (let attempt = 1; ; attempt++) {
		let changed = false;
		const onFailed = (r) => {
			if (r.failure()?.errorText === "net::ERR_NETWORK_CHANGED") changed = true;
		};
		page.on("requestfailed", onFailed);
		try {
			const resp = await page.goto(url);
			if (!changed || attempt === 3) return resp;
		} catch (e) {
			if (!/ERR_NETWORK_CHANGED/.test(e.message) || attempt === 3) throw e;
		} finally {
			page.off("requestfailed", onFailed);
		}
	}
}

export const HOST_PAGE_PATH = "/__cubicle_test_host__";

// Opens, in `page`, a host page that puts `embedUrl` in an <iframe
// id="embed"> of width x height CSS pixels, and returns the iframe's Frame
// once its page has loaded. The host page appears to come from `origin`
// (default: the embed's own origin, which a frame-ancestors 'self' policy
// allows); give another origin to test cross-site embedding.
export async function embedInHostPage(page, embedUrl, { origin, width = 640, height = 480 } = {}) {
	const hostOrigin = origin || new URL(embedUrl).origin;
	const hostUrl = hostOrigin + HOST_PAGE_PATH;
	const html =
		"<!doctype html><html><head><meta charset=utf-8><title>host</title>" +
		"<style>html,body{margin:0;background:#333}iframe{display:block;border:0}</style></head>" +
		`<body><iframe id="embed" width="${width}" height="${height}" ` +
		`src="${htmlAttr(embedUrl)}"></iframe></body></html>`;
	await page.route(hostUrl, (route) =>
		route.fulfill({ status: 200, contentType: "text/html; charset=utf-8", body: html }),
	);
	await page.goto(hostUrl);
	const handle = await page.waitForSelector("iframe#embed");
	const frame = await handle.contentFrame();
	await frame.waitForLoadState("load");
	return frame;
}

function htmlAttr(s) {
	return s.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
}

// Waits until the embed page in `frame` (a Page or a Frame) reaches
// `state` (connecting | connected | disconnected | denied).
export async function embedWaitState(frame, state, timeout = WAIT_MS) {
	try {
		await frame.waitForFunction((s) => document.body && document.body.dataset.state === s, state, {
			timeout,
		});
	} catch (e) {
		const now = await embedState(frame).catch(() => "(unreadable)");
		throw new Error(`embed page did not reach state "${state}" (it is ${JSON.stringify(now)}): ${e.message}`);
	}
}

// The embed page's state and status line: { state, status }.
export async function embedState(frame) {
	return frame.evaluate(() => ({
		state: document.body.dataset.state,
		status: document.getElementById("status").textContent,
	}));
}

// The desktop canvas's framebuffer size and its size on screen.
export async function embedCanvasGeometry(frame) {
	return frame.evaluate(() => {
		const c = document.querySelector("#screen canvas");
		const r = c.getBoundingClientRect();
		return { width: c.width, height: c.height, cssWidth: r.width, cssHeight: r.height };
	});
}

// The RGBA pixel of the desktop canvas at framebuffer position (x, y),
// default its centre.
export async function embedCanvasPixel(frame, x, y) {
	return frame.evaluate(
		([px, py]) => {
			const c = document.querySelector("#screen canvas");
			const cx = px === undefined ? Math.floor(c.width / 2) : px;
			const cy = py === undefined ? Math.floor(c.height / 2) : py;
			return Array.from(c.getContext("2d").getImageData(cx, cy, 1, 1).data);
		},
		[x, y],
	);
}

// Waits until the canvas pixel at (x, y) (default the centre) is `rgb`
// ([r, g, b]).
export async function embedWaitPixel(frame, rgb, { x, y, timeout = WAIT_MS } = {}) {
	try {
		await frame.waitForFunction(
			([px, py, want]) => {
				const c = document.querySelector("#screen canvas");
				if (!c || !c.width) {
					return false;
				}
				const cx = px === undefined ? Math.floor(c.width / 2) : px;
				const cy = py === undefined ? Math.floor(c.height / 2) : py;
				const d = c.getContext("2d").getImageData(cx, cy, 1, 1).data;
				return d[0] === want[0] && d[1] === want[1] && d[2] === want[2];
			},
			[x, y, rgb],
			{ timeout },
		);
	} catch (e) {
		const got = await embedCanvasPixel(frame, x, y).catch(() => "(no canvas)");
		throw new Error(`canvas pixel never became ${JSON.stringify(rgb)} (it is ${JSON.stringify(got)}): ${e.message}`);
	}
}
