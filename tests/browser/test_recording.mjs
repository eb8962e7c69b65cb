// Screen recordings end to end: a real cubicled records a real desktop
// computer while the test drives it through the API (launch, click, type,
// key, screenshot); the WebM it gives back is played in Debian's Chromium
// (playwright-core) from a page the test serves with a <video>: its
// duration is checked, and the frame at the moment of a screenshot the
// test took meanwhile is drawn to a canvas and compared with that
// screenshot, within a tolerance for VP8's loss. Also: the action track,
// a still screen costing almost no frame, another workspace's key (404), a
// computer stopped and deleted under a recording (kept or not), and the
// workspace's storage quota (507).

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";

import { Cubicled, until as untilFor } from "../host/cubicled.mjs";
import { browserLaunch, WAIT_MS } from "./browser.mjs";

let cubicled, key, keyOther, desk, other, browser;
const until = (fn, what, timeout = WAIT_MS) => untilFor(fn, what, timeout);

// A raw call: { status, json, bytes }.
async function call(method, p, body, k = key) {
	const r = await fetch(cubicled.base + p, {
		method,
		headers: { Authorization: "Bearer " + k, "Content-Type": "application/json" },
		body: body === undefined ? undefined : typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
	});
	const bytes = new Uint8Array(await r.arrayBuffer());
	let json = null;
	try {
		json = JSON.parse(new TextDecoder().decode(bytes));
	} catch {
		/* bytes */
	}
	return { status: r.status, json, bytes, type: r.headers.get("content-type") };
}

async function ok(method, p, body, status = 200, k = key) {
	const r = await call(method, p, body, k);
	assert.equal(r.status, status, `${method} ${p} -> ${r.status} ${JSON.stringify(r.json)}`);
	return r;
}

const rec = (cid, rid = "", tail = "") => `/v1/computers/${cid}/recordings${rid ? "/" + rid : ""}${tail}`;
const act = (cid, name, params = {}) => ok("POST", `/v1/computers/${cid}/actions/${name}`, params);

before(async () => {
	// 16 MiB of session storage per workspace: the quota test fills it.
	cubicled = await new Cubicled(["--session-quota-mb", "16"]).start();
	key = (await cubicled.workspace("rec")).key;
	keyOther = (await cubicled.workspace("rec-other")).key;
	const boot = (k) =>
		ok("POST", "/v1/computers?wait=running&timeout_s=120", { kind: "desktop", isolation: "container" }, 201, k);
	[desk, other] = (await Promise.all([boot(key), boot(keyOther)])).map((r) => r.json);
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

// Until two screenshots a second apart are the same bytes: the screen is
// still. (Two quick equal ones were not enough: a fresh desktop under a
// loaded CI machine still redrew a panel plugin after them.)
async function settled(cid) {
	let last = null;
	return until(async () => {
		const s = (await act(cid, "screenshot")).bytes;
		const same = last && Buffer.compare(Buffer.from(s), Buffer.from(last)) === 0;
		last = s;
		if (!same) {
			await new Promise((r) => setTimeout(r, 1000));
		}
		return same ? s : null;
	}, "a still screen");
}

test("a still screen costs (almost) no frame", async () => {
	await settled(desk.id);
	const r = (await ok("POST", rec(desk.id), {}, 201)).json;
	assert.equal(r.state, "recording");
	assert.match(r.id, /^rec-[0-9a-f]{16}$/);
	await until(async () => {
		const list = (await ok("GET", rec(desk.id))).json.recordings;
		return list.find((x) => x.id === r.id).duration_ms >= 3000;
	}, "3 s of recording");
	const done = (await ok("POST", rec(desk.id, r.id, "/stop"), {})).json;
	assert.equal(done.state, "stopped");
	assert.equal(done.reason, "stopped");
	assert.ok(done.duration_ms >= 3000, JSON.stringify(done));
	// 10 frames a second were allowed (30 in 3 s of a changing screen): the
	// first picture, the held end, and a few changes at most (the panel's
	// clock turning a minute, a late redraw of the fresh desktop).
	assert.ok(done.frames >= 2 && done.frames <= 6, `frames ${done.frames}`);
	assert.ok(done.bytes > 0 && done.bytes < 400000, `bytes ${done.bytes}`);
	await ok("DELETE", rec(desk.id, r.id));
});

test("another workspace's key sees no recording", async () => {
	const r = (await ok("POST", rec(desk.id), {}, 201)).json;
	for (const [m, p] of [
		["GET", rec(desk.id)],
		["POST", rec(desk.id)],
		["GET", rec(desk.id, r.id)],
		["GET", rec(desk.id, r.id, "/actions")],
		["POST", rec(desk.id, r.id, "/stop")],
		["DELETE", rec(desk.id, r.id)],
		// its own computer, someone else's recording id
		["GET", rec(other.id, r.id)],
		["POST", rec(other.id, r.id, "/stop")],
	]) {
		const x = await call(m, p, m === "POST" ? {} : undefined, keyOther);
		assert.equal(x.status, 404, `${m} ${p} with another workspace's key -> ${x.status}`);
		assert.equal(x.json.error.code, "not_found");
	}
	// still recording: nothing of the above touched it
	const list = (await ok("GET", rec(desk.id))).json.recordings;
	assert.equal(list.find((x) => x.id === r.id).state, "recording");
	await ok("DELETE", rec(desk.id, r.id));
	assert.equal((await call("GET", rec(desk.id, r.id))).status, 404);
});

// Serves the recording and a page with a <video> to Chromium: the video's
// duration, and the frame at `at` seconds against the PNG screenshot, as
// the mean and the 99th percentile of per-channel differences, and the
// largest difference in the 24x24 box at `pointer` (where the cursor is
// drawn: the screenshot has none). Without png, the duration only.
async function playInChromium(webm, png, at, pointer = { x: 0, y: 0 }) {
	const server = http.createServer((req, res) => {
		if (req.url === "/rec.webm") {
			res.writeHead(200, { "Content-Type": "video/webm", "Content-Length": webm.length });
			res.end(Buffer.from(webm));
		} else if (req.url === "/shot.png" && png) {
			res.writeHead(200, { "Content-Type": "image/png" });
			res.end(Buffer.from(png));
		} else {
			res.writeHead(200, { "Content-Type": "text/html" });
			res.end('<!doctype html><video id=v muted preload=auto></video><img id=i src="/shot.png">');
		}
	});
	await new Promise((r) => server.listen(0, "127.0.0.1", r));
	const page = await browser.newPage();
	try {
		await page.goto(`http://127.0.0.1:${server.address().port}/`);
		return await page.evaluate(async ([t, px, py, compare]) => {
			const v = document.getElementById("v");
			const img = document.getElementById("i");
			// From a Blob: seekable without HTTP ranges.
			v.src = URL.createObjectURL(await (await fetch("/rec.webm")).blob());
			await new Promise((ok, bad) => {
				if (v.readyState >= 1) ok();
				v.onloadedmetadata = ok;
				v.onerror = () => bad(new Error("the video does not load: " + (v.error && v.error.message)));
			});
			const duration = v.duration;
			if (!compare) {
				return { duration };
			}
			await img.decode();
			// Seek, then wait for the frame there to be presented (seeked can
			// come before it is drawable).
			await new Promise((ok) => {
				v.onseeked = ok;
				v.currentTime = t;
			});
			await new Promise((ok) => {
				const check = () => (v.readyState >= 2 ? ok() : setTimeout(check, 10));
				check();
			});
			const draw = (src, w, h) => {
				const c = document.createElement("canvas");
				c.width = w;
				c.height = h;
				const g = c.getContext("2d");
				g.drawImage(src, 0, 0, w, h);
				return g.getImageData(0, 0, w, h).data;
			};
			const a = draw(v, v.videoWidth, v.videoHeight);
			const b = draw(img, v.videoWidth, v.videoHeight);
			const hist = new Array(256).fill(0);
			let sum = 0;
			for (let i = 0; i < a.length; i += 4) {
				for (let k = 0; k < 3; k++) {
					const d = Math.abs(a[i + k] - b[i + k]);
					hist[d]++;
					sum += d;
				}
			}
			const n = (a.length / 4) * 3;
			let acc = 0,
				p99 = 0;
			for (; p99 < 256; p99++) {
				acc += hist[p99];
				if (acc >= n * 0.99) break;
			}
			let box = 0;
			for (let y = Math.max(0, py - 4); y < Math.min(v.videoHeight, py + 20); y++) {
				for (let x = Math.max(0, px - 4); x < Math.min(v.videoWidth, px + 20); x++) {
					const i = (y * v.videoWidth + x) * 4;
					for (let k = 0; k < 3; k++) box = Math.max(box, Math.abs(a[i + k] - b[i + k]));
				}
			}
			return { duration, width: v.videoWidth, height: v.videoHeight, mean: sum / n, p99, box };
		}, [at, pointer.x, pointer.y, !!png]);
	} finally {
		await page.close();
		server.close();
	}
}

test("a scripted session: its action track, and the video plays in Chromium", async (tc) => {
	const r = (await ok("POST", rec(desk.id), { keep: false }, 201)).json;
	assert.equal(r.width, 1280);
	assert.equal(r.height, 800);
	await act(desk.id, "launch", { app: "xfce4-terminal", wait_s: 20 });
	const win = await until(async () => {
		const w = (await act(desk.id, "windows")).json.windows.find((x) => /terminal/i.test(x.app + x.title));
		return w && w.focused ? w : null;
	}, "the terminal's window, focused");
	const click = { x: win.x + 60, y: win.y + 60 };
	await act(desk.id, "left_click", click);
	await act(desk.id, "type", { text: "echo recorded-by-cubicle" });
	await act(desk.id, "key", { key: "Return" });
	// A screenshot, then another a second later on the recording's clock:
	// when they are the same, the screen was still between them, and the
	// video must show that picture in the middle of that second.
	const lastAction = async () => {
		const track = (await ok("GET", rec(desk.id, r.id, "/actions"))).json.actions;
		return track[track.length - 1];
	};
	const recorded = async () => (await ok("GET", rec(desk.id))).json.recordings.find((y) => y.id === r.id);
	let shot, from, to;
	await until(
		async () => {
			const a = (await act(desk.id, "screenshot")).bytes;
			const ta = await lastAction();
			await until(async () => (await recorded()).duration_ms >= ta.t_ms + ta.duration_ms + 1000, "a second more");
			const b = (await act(desk.id, "screenshot")).bytes;
			const tb = await lastAction();
			assert.equal(tb.action, "screenshot");
			if (Buffer.compare(Buffer.from(a), Buffer.from(b)) !== 0) {
				return false;
			}
			[shot, from, to] = [b, ta, tb];
			return true;
		},
		"the screen still for a second",
		90000,
	);
	const done = (await ok("POST", rec(desk.id, r.id, "/stop"), {})).json;
	assert.equal(done.state, "stopped");
	assert.ok(done.frames >= 3, `frames ${done.frames}`);

	// The track: every action, in order, with its parameters and status.
	const t = (await ok("GET", rec(desk.id, r.id, "/actions"))).json;
	assert.equal(t.recording.id, r.id);
	const names = t.actions.map((a) => a.action);
	for (const want of ["launch", "windows", "left_click", "type", "key", "screenshot"]) {
		assert.ok(names.includes(want), `${want} in the track: ${names.join(",")}`);
	}
	assert.equal(t.recording.actions, t.actions.length);
	const typed = t.actions.find((a) => a.action === "type");
	assert.equal(typed.params.text, "echo recorded-by-cubicle");
	assert.equal(typed.status, 200);
	assert.deepEqual(t.actions.find((a) => a.action === "key").params, { key: "Return" });
	for (let i = 1; i < t.actions.length; i++) {
		assert.ok(t.actions[i].t_ms >= t.actions[i - 1].t_ms, "t_ms never goes back");
	}
	assert.ok(t.actions.every((a) => a.t_ms >= 0 && a.t_ms <= done.duration_ms));

	// The file plays in Chromium: its duration, and the picture at the
	// screenshot's moment (the screen was still around it).
	const file = await ok("GET", rec(desk.id, r.id));
	assert.equal(file.type, "video/webm");
	assert.equal(file.bytes.length, done.bytes);
	const at = (from.t_ms + from.duration_ms + to.t_ms) / 2 / 1000;
	const v = await playInChromium(file.bytes, shot, at, click);
	assert.equal(v.width, 1280);
	assert.equal(v.height, 800);
	assert.ok(Math.abs(v.duration - done.duration_ms / 1000) < 0.25, `duration ${v.duration} vs ${done.duration_ms} ms`);
	tc.diagnostic(`frame vs screenshot: mean ${v.mean.toFixed(2)}, p99 ${v.p99}, at the pointer ${v.box}; video ${v.duration} s`);
	assert.ok(v.mean < 4 && v.p99 < 64, `frame vs screenshot: mean ${v.mean.toFixed(2)}, p99 ${v.p99}`);
	// ... and it is not any picture: the one before the terminal opened differs.
	const first = await playInChromium(file.bytes, shot, 0);
	assert.ok(first.mean > v.mean + 1, `the first frame differs from the screenshot (${first.mean.toFixed(2)})`);
});

test("the workspace's storage quota: a recording that fills it ends, then 507", async () => {
	// 16 MiB of session disk, shared by session files and recordings.
	await ok("PUT", "/v1/sessions/fill/files?path=input/a.bin", new Uint8Array(4 << 20), 200, keyOther);
	const r = (await ok("POST", rec(other.id), {}, 201, keyOther)).json;
	// Fill the rest with session files, a MiB at a time, until the quota says no.
	let full = null;
	for (let i = 0; i < 32 && !full; i++) {
		const put = await call("PUT", `/v1/sessions/fill/files?path=input/m${i}.bin`, new Uint8Array(1 << 20), keyOther);
		if (put.status === 507) {
			full = put;
		} else {
			assert.equal(put.status, 200, JSON.stringify(put.json));
		}
	}
	assert.ok(full, "the session disk filled up");
	const ended = await until(async () => {
		const x = (await ok("GET", rec(other.id), undefined, 200, keyOther)).json.recordings[0];
		return x.state !== "recording" ? x : null;
	}, "the recording to end on the full disk");
	assert.equal(ended.reason, "storage_full", JSON.stringify(ended));
	assert.match(ended.error, /--session-quota-mb/);
	// ... its file finished: it plays (Chromium reads its duration).
	const file = await ok("GET", rec(other.id, r.id), undefined, 200, keyOther);
	assert.equal(file.bytes.length, ended.bytes);
	const v = await playInChromium(file.bytes, null, 0);
	assert.ok(Math.abs(v.duration - ended.duration_ms / 1000) < 0.25, `duration ${v.duration} vs ${ended.duration_ms} ms`);
	// No room for another one.
	const again = await call("POST", rec(other.id), {}, keyOther);
	assert.equal(again.status, 507, JSON.stringify(again.json));
	assert.equal(again.json.error.code, "insufficient_storage");
	assert.match(again.json.error.message, /--session-quota-mb/);
});

test("a computer stopped, then deleted, under its recordings", async () => {
	const sandbox = await call("POST", rec(desk.id).replace(desk.id, "c-none"), {});
	assert.equal(sandbox.status, 404);
	const kept = (await ok("POST", rec(desk.id), {}, 201)).json;
	await act(desk.id, "move_cursor", { x: 10, y: 10 });
	// A second recording of the same computer is over the limit (1).
	const second = await call("POST", rec(desk.id), {});
	assert.equal(second.status, 429, JSON.stringify(second.json));
	await ok("POST", `/v1/computers/${desk.id}/stop`);
	let list = (await ok("GET", rec(desk.id))).json.recordings;
	const k = list.find((x) => x.id === kept.id);
	assert.equal(k.state, "stopped");
	assert.ok(k.frames >= 1 && k.bytes > 0);
	assert.equal(k.actions, 1);
	const stopped = await call("POST", rec(desk.id), {});
	assert.equal(stopped.status, 409);
	assert.match(stopped.json.error.message, /not running/);
	// keep it (stop answers a stopped one as it is, with keep changed)
	assert.equal((await ok("POST", rec(desk.id, kept.id, "/stop"), { keep: true })).json.keep, true);
	const bad = await call("POST", rec(desk.id, kept.id, "/stop"), { keep: "yes" });
	assert.equal(bad.status, 400);
	assert.equal(bad.json.error.param, "keep");
	await ok("DELETE", `/v1/computers/${desk.id}`);
	list = (await ok("GET", rec(desk.id))).json.recordings;
	assert.deepEqual(
		list.map((x) => x.id),
		[kept.id],
		"only the kept recording outlives its computer",
	);
	const file = await ok("GET", rec(desk.id, kept.id));
	assert.equal(file.bytes.length, k.bytes);
	await ok("DELETE", rec(desk.id, kept.id));
	assert.deepEqual((await ok("GET", rec(desk.id))).json.recordings, []);
});
