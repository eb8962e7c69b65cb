// The whole streaming path in a real browser: a local page iframes
// cubicled's /embed/{id}?token=…, noVNC connects through cubicled's
// token-checked WebSocket gateway to envd's VNC server on a real desktop
// computer. The witness is cubicled's own action API.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Cubicled, until as untilFor } from "../host/cubicled.mjs";
import {
	browserLaunch,
	embedCanvasGeometry,
	embedInHostPage,
	embedState,
	embedWaitState,
	WAIT_MS,
} from "./browser.mjs";

let cubicled, key, computer, browser;

const api = (method, p, body, k = key) => cubicled.api(method, p, body, k);
const act = (name, params = {}) => api("POST", `/v1/computers/${computer}/actions/${name}`, params);
const until = (fn, what, timeout = WAIT_MS) => untilFor(fn, what, timeout);

before(async () => {
	cubicled = await new Cubicled().start();
	key = (await cubicled.workspace("e2e")).key;
	computer = (await api("POST", "/v1/computers?wait=running&timeout_s=120", { kind: "desktop" })).id;
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

async function embed(params = {}, size = { width: 1280, height: 800 }) {
	const t = await api("POST", `/v1/computers/${computer}/stream`, { ttl_s: 120, ...params });
	const page = await browser.newPage();
	const frame = await embedInHostPage(page, t.embed_url, size);
	return { page, frame, token: t };
}

// The iframe's page point over framebuffer pixel (x, y).
async function canvasPoint(page, frame, x, y) {
	const iframe = await page.$("iframe#embed");
	const box = await iframe.boundingBox();
	const inner = await frame.evaluate(() => {
		const r = document.querySelector("#screen canvas").getBoundingClientRect();
		return { left: r.left, top: r.top, width: r.width };
	});
	const g = await embedCanvasGeometry(frame);
	const s = inner.width / g.width;
	return { x: box.x + inner.left + x * s, y: box.y + inner.top + y * s };
}

test("the canvas shows the desktop: its pixels match a screenshot from the API", async () => {
	const { page, frame } = await embed();
	await embedWaitState(frame, "connected");
	const g = await embedCanvasGeometry(frame);
	assert.deepEqual([g.width, g.height], [1280, 800]);
	const shot = await act("screenshot_base64", { format: "png" });
	const points = [
		[640, 400],
		[100, 600],
		[1200, 700],
		[10, 10],
	];
	// Decode the API's PNG in the page and compare, allowing for the stream's
	// lossy encoding (noVNC asks for Tight with JPEG).
	await until(async () => {
		const diffs = await frame.evaluate(
			async ([b64, pts]) => {
				const img = new Image();
				img.src = "data:image/png;base64," + b64;
				await img.decode();
				const c = document.createElement("canvas");
				c.width = img.width;
				c.height = img.height;
				c.getContext("2d").drawImage(img, 0, 0);
				const live = document.querySelector("#screen canvas").getContext("2d");
				return pts.map(([x, y]) => {
					const a = c.getContext("2d").getImageData(x, y, 1, 1).data;
					const b = live.getImageData(x, y, 1, 1).data;
					return Math.max(...[0, 1, 2].map((i) => Math.abs(a[i] - b[i])));
				});
			},
			[shot.image, points],
		);
		return diffs.every((d) => d <= 40);
	}, "the canvas to match the screenshot");
	await page.close();
});

test("a click and typed text in the canvas reach the desktop", async () => {
	const term = await act("launch", { app: "xfce4-terminal", wait_s: 30 });
	const w = term.window;
	const { page, frame } = await embed();
	await embedWaitState(frame, "connected");
	const cx = w.x + Math.floor(w.width / 2);
	const cy = w.y + Math.floor(w.height / 2);
	const p = await canvasPoint(page, frame, cx, cy);
	await page.mouse.click(p.x, p.y);
	await until(async () => {
		const c = await act("get_cursor_position");
		return Math.abs(c.x - cx) <= 1 && Math.abs(c.y - cy) <= 1;
	}, "the pointer to reach the terminal");
	// Keys typed before the new terminal has its focus and its shell are
	// lost (a loaded CI machine lost them once): each attempt clicks, clears
	// the shell's line with Ctrl+C and types the command again, until the
	// command has run. Every attempt goes through the canvas.
	const typed = async () =>
		(await act("bash", { command: "cat /tmp/e2e.txt 2>/dev/null" })).stdout === "typed-in-the-browser\n";
	await until(async () => {
		await page.mouse.click(p.x, p.y);
		await page.keyboard.press("Control+C");
		await page.keyboard.type("echo typed-in-the-browser > /tmp/e2e.txt\n");
		const end = Date.now() + 5000;
		while (Date.now() < end) {
			if (await typed()) {
				return true;
			}
			await new Promise((r) => setTimeout(r, 100));
		}
		return false;
	}, "the typed command to run");
	await act("close_window", { id: w.id });
	await page.close();
});

test("a view-only embed changes nothing", async () => {
	await act("move_cursor", { x: 20, y: 700 });
	const { page, frame } = await embed({ view_only: true });
	await embedWaitState(frame, "connected");
	const p = await canvasPoint(page, frame, 900, 300);
	await page.mouse.click(p.x, p.y);
	await page.keyboard.type("nope");
	// Nothing to wait for when nothing should happen: watch for a second.
	const end = Date.now() + 1000;
	while (Date.now() < end) {
		const c = await act("get_cursor_position");
		assert.deepEqual([c.x, c.y], [20, 700]);
	}
	await page.close();
});

test("forged and expired tokens show a clear refusal", async () => {
	const t = await api("POST", `/v1/computers/${computer}/stream`, { ttl_s: 1 });
	const forged = t.embed_url.replace(/token=([^&]*)/, (m, tok) => `token=${tok.slice(0, -4)}AAAA`);
	const page = await browser.newPage();
	const f1 = await embedInHostPage(page, forged);
	await embedWaitState(f1, "denied");
	assert.match((await embedState(f1)).status, /denied|expired/i);
	await until(async () => {
		const r = await fetch(t.ws_url.replace("ws://", "http://"));
		return r.status === 401;
	}, "the short token to expire");
	const f2 = await embedInHostPage(page, t.embed_url);
	await embedWaitState(f2, "denied");
	await page.close();
});

test("revoking closes the stream", async () => {
	const { page, frame } = await embed();
	await embedWaitState(frame, "connected");
	await api("POST", `/v1/computers/${computer}/stream/revoke`, {});
	await embedWaitState(frame, "denied");
	await page.close();
});
