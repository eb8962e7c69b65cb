// Previews and CDP in a real browser (docs/api.md, "Previews" and "CDP").
//
// Previews: a Vite-like dev server (tests/host/devserver.py: the sandbox
// image has python3, not node) runs in a sandbox; Chromium opens its
// preview URL, the token becomes a cookie of that host only, the app loads
// its assets by absolute paths, and an edit of a file in the sandbox
// reaches the page over the dev server's WebSocket (hot reload, no page
// load). CDP: Playwright's connectOverCDP drives the desktop's own
// Chromium through cubicled; the page it opens (served inside the guest:
// the guest cannot reach the host's loopback) is seen in a screenshot the
// API takes.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";

import { Cubicled, repoRoot, until as untilFor } from "../host/cubicled.mjs";
import { browserLaunch, playwright, WAIT_MS } from "./browser.mjs";

let cubicled, key, otherKey, sandbox, desktop, browser;

const api = (method, p, body, k = key) => cubicled.api(method, p, body, k);
const act = (id, name, params = {}) => api("POST", `/v1/computers/${id}/actions/${name}`, params);
const until = (fn, what, timeout = WAIT_MS) => untilFor(fn, what, timeout);

const APP_JS = `
const msg = document.getElementById("msg");
fetch("/message.txt", { cache: "no-store" }).then((r) => r.text()).then((t) => {
	if (msg.textContent === "loading") msg.textContent = t.trim();
});
const ws = new WebSocket("ws://" + location.host + "/__hmr", "vite-hmr");
ws.onopen = () => { document.body.dataset.hmr = ws.protocol; };
ws.onmessage = (ev) => {
	const m = JSON.parse(ev.data);
	if (m.type === "update") msg.textContent = m.text;
};
`;

async function serve(id, command, probe) {
	await act(id, "bash", { command: `(setsid ${command} >/tmp/server.log 2>&1 &)` });
	await until(
		async () =>
			(await act(id, "bash", { command: `curl -s -o /dev/null -w '%{http_code}' ${probe}` })).stdout === "200",
		`${probe} to answer in the computer`,
	);
}

before(async () => {
	cubicled = await new Cubicled().start();
	key = (await cubicled.workspace("preview")).key;
	otherKey = (await cubicled.workspace("other")).key;
	const [s, d] = await Promise.all([
		api("POST", "/v1/computers?wait=running&timeout_s=120", { kind: "sandbox" }),
		api("POST", "/v1/computers?wait=running&timeout_s=120", { kind: "desktop" }),
	]);
	sandbox = s.id;
	desktop = d.id;
	const devserver = readFileSync(path.join(repoRoot, "tests/host/devserver.py"), "utf8");
	await act(sandbox, "write_file", { path: "/tmp/devserver.py", content: devserver });
	await act(sandbox, "write_file", {
		path: "/tmp/app/index.html",
		content: '<!doctype html><title>app</title><p id="msg">loading</p><script type="module" src="/assets/app.js"></script>',
	});
	await act(sandbox, "write_file", { path: "/tmp/app/assets/app.js", content: APP_JS });
	await act(sandbox, "write_file", { path: "/tmp/app/message.txt", content: "v1\n" });
	await serve(sandbox, "python3 /tmp/devserver.py 5173 /tmp/app", "http://127.0.0.1:5173/");
	browser = await browserLaunch();
});

after(async () => {
	if (browser) {
		await browser.close();
	}
	if (cubicled) {
		await cubicled.stop();
	}
});

test("a dev server's preview: the token becomes a host cookie, and an edit arrives over its WebSocket", async () => {
	const g = await api("POST", `/v1/computers/${sandbox}/previews`, { port: 5173 });
	const host = new URL(g.url).host;
	assert.equal(host, `5173-${sandbox}.localhost:${cubicled.previewPort}`);
	const page = await browser.newPage();
	const resp = await page.goto(g.url);
	assert.equal(resp.status(), 200);
	// The token left the URL; the cookie holds it, for this host only, out
	// of the page's reach.
	assert.equal(page.url(), `http://${host}/`);
	const [cookie] = (await page.context().cookies()).filter((c) => c.name === "cubicle_preview");
	assert.ok(cookie, "the preview's cookie");
	assert.equal(cookie.domain, `5173-${sandbox}.localhost`);
	assert.equal(cookie.path, "/");
	assert.equal(cookie.httpOnly, true);
	assert.equal(cookie.sameSite, "Lax");
	assert.equal(await page.evaluate(() => document.cookie.includes("cubicle_preview")), false);
	// The app's absolute-path script ran and its WebSocket is open.
	await page.waitForFunction(() => document.getElementById("msg").textContent === "v1");
	await page.waitForFunction(() => document.body.dataset.hmr === "vite-hmr");
	await page.evaluate(() => {
		window.stillTheSamePage = true;
	});
	await act(sandbox, "write_file", { path: "/tmp/app/message.txt", content: "v2 from the sandbox\n" });
	await page.waitForFunction(() => document.getElementById("msg").textContent === "v2 from the sandbox", null, {
		timeout: WAIT_MS,
	});
	assert.equal(await page.evaluate(() => window.stillTheSamePage), true, "updated in place, not reloaded");
	await page.close();
});

test("a forged or expired preview URL shows a refusal page; another port is not reachable", async () => {
	const g = await api("POST", `/v1/computers/${sandbox}/previews`, { port: 5173, ttl_s: 1 });
	const forged = g.url.replace(/.{4}$/, (s) => (s === "AAAA" ? "BBBB" : "AAAA"));
	const page = await browser.newPage();
	let resp = await page.goto(forged);
	assert.equal(resp.status(), 401);
	assert.match(await page.textContent("h1"), /401/);
	// A token on another port's host.
	const long = await api("POST", `/v1/computers/${sandbox}/previews`, { port: 5173 });
	resp = await page.goto(long.url.replace("5173-", "5174-"));
	assert.equal(resp.status(), 403);
	// Once expired.
	await until(async () => (await page.goto(g.url)).status() === 401, "the 1 s preview to expire", 10000);
	assert.match(await page.textContent("#message"), /expired/);
	await page.close();
});

test("CDP: connectOverCDP drives the desktop's browser, whose page the API's screenshot shows", async () => {
	await act(desktop, "write_file", {
		path: "/tmp/cdp/index.html",
		content: '<!doctype html><title>cdp</title><body style="margin:0;background:#ff00ff"></body>',
	});
	await serve(desktop, "python3 -m http.server 8765 --bind 127.0.0.1 --directory /tmp/cdp", "http://127.0.0.1:8765/");
	const c = await api("POST", `/v1/computers/${desktop}/cdp`, {});
	assert.match(c.ws_url, new RegExp(`^ws://127\\.0\\.0\\.1:${cubicled.previewPort}/cdp/v1\\.[^/]+/devtools/browser/`));
	assert.match(c.browser, /Chrom/);
	// /json/version through cubicled names a URL through cubicled.
	const v = await (await fetch(`${c.http_url}/json/version`)).json();
	assert.ok(v.webSocketDebuggerUrl.startsWith(`ws://127.0.0.1:${cubicled.previewPort}/cdp/`), v.webSocketDebuggerUrl);
	const cdp = await playwright().chromium.connectOverCDP(c.ws_url, { timeout: 60000 });
	try {
		const page = await cdp.contexts()[0].newPage();
		await page.goto("http://127.0.0.1:8765/");
		assert.equal(await page.title(), "cdp");
		// The person's view: the API's screenshot shows the page's colour.
		const decoder = await browser.newPage();
		await until(async () => {
			const shot = await act(desktop, "screenshot_base64", { format: "png" });
			const px = await decoder.evaluate(async (b64) => {
				const img = new Image();
				img.src = "data:image/png;base64," + b64;
				await img.decode();
				const cv = document.createElement("canvas");
				cv.width = img.width;
				cv.height = img.height;
				const g = cv.getContext("2d");
				g.drawImage(img, 0, 0);
				return [
					[img.width / 2, img.height / 2],
					[img.width / 3, (img.height * 2) / 3],
				].map(([x, y]) => Array.from(g.getImageData(x, y, 1, 1).data.slice(0, 3)));
			}, shot.image);
			return px.every(([r, g, b]) => r > 230 && g < 25 && b > 230);
		}, "the page's magenta in a screenshot");
		await decoder.close();
		// The browser is the desktop's: its window is there for the live view.
		const windows = await act(desktop, "windows");
		assert.ok(
			windows.windows.some((w) => /chrom/i.test(`${w.app_class} ${w.title}`) && /cdp/.test(w.title)),
			JSON.stringify(windows),
		);
	} finally {
		await cdp.close();
	}
});

test("CDP: a forged or expired token is refused, another workspace's key is 404", async () => {
	const c = await api("POST", `/v1/computers/${desktop}/cdp`, { ttl_s: 1 });
	const forged = c.ws_url.replace(/cdp\/(v1\.[^/]+)\//, (m, t) => `cdp/${t.slice(0, -4)}AAAA/`);
	await assert.rejects(playwright().chromium.connectOverCDP(forged, { timeout: 10000 }), /401/);
	await until(async () => (await fetch(`${c.http_url}/json/version`)).status === 401, "the 1 s CDP URL to expire", 10000);
	await assert.rejects(playwright().chromium.connectOverCDP(c.ws_url, { timeout: 10000 }), /401/);
	await assert.rejects(api("POST", `/v1/computers/${desktop}/cdp`, {}, otherKey), /-> 404/);
	// A sandbox has no desktop browser.
	await assert.rejects(api("POST", `/v1/computers/${sandbox}/cdp`, {}), /-> 409/);
});
