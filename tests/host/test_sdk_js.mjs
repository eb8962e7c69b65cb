// The TypeScript SDK (sdk/js) as it ships: packed with `npm pack` (its
// prepack builds it with tsc), unpacked into a temporary node_modules and
// imported from there, then its whole surface against a real cubicled and
// a real desktop computer: Computer.create, every action of
// spec/actions.json as a method, typed errors, files streamed both ways,
// run, stream URLs, computer-use (a toolset turn whose middle call fails),
// connect tokens, usage, previews (a server in a sandbox through its URL,
// the token becoming a cookie), CDP, recordings (downloaded as WebM); and
// the README's agent loop type-checked against the shipped .d.ts.
// test_sdk_parity.mjs holds its surface against the Python SDK's.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, openAsBlob, statSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";

import { Cubicled, repoRoot, until } from "./cubicled.mjs";

const sdkDir = path.join(repoRoot, "sdk", "js");
const spec = JSON.parse(readFileSync(path.join(repoRoot, "spec", "actions.json"), "utf8"));

let tmp, sdk, srv, client, desk, sand, ws, key;

before(async () => {
	tmp = mkdtempSync(path.join(os.tmpdir(), "cubicle-sdk-js-"));
	const out = execFileSync("npm", ["pack", "--json", "--pack-destination", tmp], {
		cwd: sdkDir,
		encoding: "utf8",
		stdio: ["ignore", "pipe", "inherit"],
	});
	const packed = JSON.parse(out.slice(out.indexOf("[")))[0];
	sdk = { files: packed.files.map((f) => f.path).sort(), tarball: path.join(tmp, packed.filename) };
	const dest = path.join(tmp, "node_modules", "cubicle");
	mkdirSync(dest, { recursive: true });
	execFileSync("tar", ["xzf", sdk.tarball, "-C", dest, "--strip-components=1"]);
	sdk.mod = await import(pathToFileURL(path.join(dest, "dist", "index.js")).href);
	srv = await new Cubicled().start();
	({ ws, key } = await srv.workspace("sdk-js"));
	client = new sdk.mod.Client({ url: srv.base, api_key: key });
	[desk, sand] = await Promise.all([
		sdk.mod.Computer.create({ kind: "desktop", client, idle_timeout_s: 600 }),
		sdk.mod.Computer.create({ kind: "sandbox", size: "xs", client, idle_timeout_s: 600 }),
	]);
});

// GET of a preview URL as a browser sends it: to the preview listener on
// the loopback, its host name in Host (node resolves no *.localhost name),
// no redirect followed. Answers {status, headers, body}.
function previewGet(url, headers = {}) {
	const u = new URL(url);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{ host: "127.0.0.1", port: u.port, path: u.pathname + u.search, agent: false,
				headers: { Host: u.host, Accept: "text/html", ...headers } },
			(res) => {
				let body = "";
				res.setEncoding("utf8");
				res.on("data", (d) => (body += d));
				res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
			},
		);
		req.on("error", reject);
		req.end();
	});
}

after(async () => {
	if (srv) await srv.stop();
	if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe("the package", () => {
	test("holds the built .js and .d.ts, its README and package.json, nothing else", () => {
		const names = sdk.files;
		assert.ok(names.includes("package.json") && names.includes("README.md"), names.join(" "));
		for (const f of names.filter((n) => n.startsWith("dist/"))) {
			assert.match(f, /^dist\/[a-z_]+\.(js|d\.ts)$/);
		}
		for (const m of ["index", "client", "computer", "errors", "actions", "_table", "types"]) {
			assert.ok(names.includes(`dist/${m}.js`) && names.includes(`dist/${m}.d.ts`), m);
		}
		assert.deepEqual(names.filter((n) => !n.startsWith("dist/")).sort(), ["README.md", "package.json"]);
		const pkg = JSON.parse(readFileSync(path.join(sdkDir, "package.json"), "utf8"));
		assert.equal(pkg.type, "module");
		assert.deepEqual(pkg.dependencies ?? {}, {}, "no runtime dependencies");
	});

	test("the README's agent loop type-checks against the shipped .d.ts", () => {
		// examples/ import "cubicle": the unpacked package, by a tsconfig of its own.
		const cfg = path.join(tmp, "tsconfig.json");
		writeFileSync(cfg, JSON.stringify({
			extends: path.join(sdkDir, "tsconfig.json"),
			compilerOptions: { noEmit: true, rootDir: sdkDir, typeRoots: [path.join(sdkDir, "node_modules", "@types")],
				baseUrl: tmp, paths: { cubicle: [path.join(tmp, "node_modules", "cubicle", "dist", "index.d.ts")] } },
			files: [path.join(sdkDir, "examples", "agent_loop.ts")],
		}));
		execFileSync(path.join(sdkDir, "node_modules", ".bin", "tsc"), ["-p", cfg], { stdio: "inherit" });
	});
});

describe("against a real desktop", () => {
	test("every action of spec/actions.json is a method of Computer", () => {
		const C = sdk.mod.Computer.prototype;
		for (const a of spec.actions) {
			if (a.python === false) continue; // read_file, write_file: streamed methods of their own
			assert.equal(typeof C[a.name], "function", a.name);
		}
		for (const m of ["read_file", "write_file", "read_file_stream", "stream", "stream_url",
			"computer_use", "stop", "start", "delete", "refresh", "wait", "action", "action_raw",
			"preview", "preview_url", "previews", "revoke_preview", "cdp", "start_recording",
			"stop_recording", "recordings", "recording_actions", "download_recording", "delete_recording"]) {
			assert.equal(typeof C[m], "function", m);
		}
		assert.equal(sdk.mod.TABLE.length, spec.actions.filter((a) => a.python !== false).length);
	});

	test("input, screen, windows, clipboard, processes", async () => {
		assert.equal(desk.state, "running");
		assert.equal(desk.kind, "desktop");
		await desk.left_click(100, 120);
		const at = await desk.get_cursor_position();
		assert.deepEqual([at.x, at.y], [100, 120]);
		await desk.move_cursor(300, 200);
		await desk.click(310, 210, { button: "left", clicks: 2 });
		const at2 = await desk.get_cursor_position();
		assert.deepEqual([at2.x, at2.y], [310, 210]);
		await desk.scroll("down", 2, { x: 400, y: 300 });
		await desk.hotkey("ctrl", "alt"); // rest parameters, no options
		const size = await desk.get_screen_size();
		assert.ok(size.width >= 640 && size.height >= 480, JSON.stringify(size));
		const png = await desk.screenshot({ max_width: 640 });
		assert.ok(png instanceof Uint8Array);
		assert.deepEqual([...png.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10]);
		const region = await desk.screenshot({ format: "jpeg", region: [0, 0, 200, 100] });
		assert.deepEqual([...region.subarray(0, 2)], [0xff, 0xd8]);
		assert.ok(Array.isArray(await desk.windows()));
		await desk.set_clipboard("from typescript ✓");
		assert.equal(await desk.get_clipboard(), "from typescript ✓");
		const r = await desk.bash("echo out; echo err >&2; exit 3");
		assert.ok(r instanceof sdk.mod.ProcessResult);
		assert.deepEqual([r.stdout, r.stderr, r.exit_code, r.ok], ["out\n", "err\n", 3, false]);
		const py = await desk.python("import sys; print(sys.stdin.read().upper())", { stdin: "abc" });
		assert.equal(py.stdout, "ABC\n");
		const env = await desk.bash("echo $GREETING", { env: { GREETING: "hi" }, cwd: "/tmp" });
		assert.equal(env.stdout, "hi\n");
		assert.equal((await desk.action("get_cursor_position")).x, 400); // scroll moved it there
	});

	test("typed errors per API code", async () => {
		const m = sdk.mod;
		await assert.rejects(m.Computer.get("c-nothere", { client }), (e) =>
			e instanceof m.NotFound && e.status === 404 && e.code === "not_found" && /^[0-9a-f]{16}$/.test(e.requestId));
		await assert.rejects(desk.left_click(-5, 10), (e) =>
			e instanceof m.InvalidParameter && e.param === "x" && e instanceof m.CubicleError);
		const bad = new m.Client({ url: srv.base, api_key: "ck_wrong" });
		await assert.rejects(m.Computer.list({ client: bad }), m.Unauthorized);
		await assert.rejects(client.request("GET", "/v1/workspaces"), m.Forbidden);
		await assert.rejects(desk.bash("sleep 5", { timeout_s: 1 }), (e) =>
			e instanceof m.Timeout && e.result instanceof m.ProcessResult && e.result.timed_out);
		const gone = new m.Client({ url: "http://127.0.0.1:1", api_key: key });
		await assert.rejects(gone.healthz(), (e) => e instanceof m.ConnectionFailed && e.code === "unreachable");
		assert.throws(() => desk.move_cursor(1), TypeError); // a required positional missing
		// install_packages(...apt, {pip, npm}): both reach envd, which checks
		// every name before it installs anything (no network needed here).
		await assert.rejects(desk.install_packages("jq", "Not A Package!", { pip: ["requests"] }), (e) =>
			e instanceof m.InvalidParameter && e.param === "apt" && /Not A Package!/.test(e.message));
		await assert.rejects(desk.install_packages({ pip: ["--index-url=http://127.0.0.1:1/"] }), (e) =>
			e instanceof m.InvalidParameter && e.param === "pip");
		assert.equal(m.fromAnswer(507, { error: { code: "insufficient_storage", message: "full" } }).constructor,
			m.InsufficientStorage);
		assert.equal(m.fromAnswer(502, null).constructor, m.BadGateway);
	});

	test("files streamed both ways", async () => {
		// 3 MiB from a Blob of a local file (fs.openAsBlob: streamed from disk) ...
		const local = path.join(tmp, "up.bin");
		const bytes = new Uint8Array(3 << 20);
		for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + (i >> 12)) & 255;
		writeFileSync(local, bytes);
		const sha = createHash("sha256").update(bytes).digest("hex");
		const w = await desk.write_file("/home/user/up.bin", await openAsBlob(local));
		assert.deepEqual([w.ok, w.size], [true, bytes.length]);
		// ... and from a ReadableStream with its length.
		const chunks = [new TextEncoder().encode("hello, "), new TextEncoder().encode("stream")];
		const rs = new ReadableStream({ pull(c) { const x = chunks.shift(); x ? c.enqueue(x) : c.close(); } });
		assert.equal((await desk.write_file("/home/user/s.txt", rs, { length: 13 })).size, 13);
		assert.equal(new TextDecoder().decode(await desk.read_file("/home/user/s.txt")), "hello, stream");
		await desk.write_file("/home/user/t.txt", "text ✓");
		assert.equal(new TextDecoder().decode(await desk.read_file("/home/user/t.txt")), "text ✓");
		// Down: into a local file, streamed, and as a web stream.
		const down = path.join(tmp, "down.bin");
		assert.equal(await desk.read_file("/home/user/up.bin", down), bytes.length);
		assert.equal(createHash("sha256").update(readFileSync(down)).digest("hex"), sha);
		assert.equal(statSync(down).size, bytes.length);
		const h = createHash("sha256");
		let pieces = 0;
		for await (const chunk of await desk.read_file_stream("/home/user/up.bin")) {
			h.update(chunk);
			pieces++;
		}
		assert.equal(h.digest("hex"), sha);
		assert.ok(pieces > 1, "arrived in pieces");
		await assert.rejects(desk.read_file("/home/user/none"), sdk.mod.NotFound);
	});

	test("run, stream URLs, computer-use, connect tokens, usage, list", async () => {
		const py = await client.run("python", "print(6 * 7)");
		assert.equal(py.stdout, "42\n");
		const js = await client.run("js", "console.log(stdin.length)", { stdin: "abcd" });
		assert.equal(js.stdout, "4\n");
		assert.equal((await client.run("python", "1/0")).error.type, "exception");
		const url = await desk.stream_url({ view_only: true, ttl_s: 30 });
		assert.match(url, new RegExp(`/embed/${desk.id}\\?token=`));
		const page = await fetch(url);
		assert.equal(page.status, 200);
		const tok = await desk.stream({ ttl_s: 30 });
		assert.match(tok.ws_url, /^ws:\/\//);
		assert.equal(tok.view_only, false);
		assert.equal((await desk.revoke_streams()).ok, true);
		const shot = await desk.computer_use({ action: "mouse_move", coordinate: [50, 60] }, { dialect: "anthropic" });
		assert.equal(shot.type, "tool_result");
		assert.equal(shot.content[0].source.media_type, "image/png");
		const use = await desk.computer_use({ type: "tool_use", id: "toolu_1", name: "computer",
			input: { action: "cursor_position" } });
		assert.equal(use.tool_use_id, "toolu_1");
		assert.match(use.content[0].text, /X=50,Y=60/);
		const oa = await desk.computer_use({ type: "click", x: 70, y: 80 }, { dialect: "openai" });
		assert.equal(oa.type, "computer_call_output");
		const ct = await client.connect_token({ kind: "sandbox", name: "laptop", ttl_s: 60 });
		assert.equal(ct.kind, "sandbox");
		assert.match(ct.command, /--connect/);
		const usage = await client.usage();
		assert.equal(usage.workspace, ws);
		assert.ok(usage.computers.some((c) => c.id === desk.id));
		const listed = await sdk.mod.Computer.list({ client, kind: "desktop" });
		assert.deepEqual(listed.map((c) => c.id), [desk.id]);
		assert.equal((await client.healthz()).ok, true);
	});

	test("computer-use: a toolset turn whose middle call fails, a GA OpenAI batch", async () => {
		const m = sdk.mod;
		const size = await desk.get_screen_size();
		// The model sees half the screen; a point a of its display d is
		// screen pixel ⌊(2a+1)·s / 2d⌋ (docs/computer-use.md).
		const [w, h] = [Math.floor(size.width / 2), Math.floor(size.height / 2)];
		const at = (x, y) => [Math.floor(((2 * x + 1) * size.width) / (2 * w)), Math.floor(((2 * y + 1) * size.height) / (2 * h))];
		const cursor = async () => {
			const p = await desk.get_cursor_position();
			return [p.x, p.y];
		};
		const use = (id, name, input) => ({ type: "tool_use", id, name, toolset_name: "computer", input });
		const turn = { type: "message", role: "assistant", content: [
			{ type: "text", text: "Moving, then a call without its coordinate, then a click." },
			use("toolu_a", "mouse_move", { coordinate: [40, 50] }),
			use("toolu_b", "mouse_move", {}),
			use("toolu_c", "left_click", { coordinate: [60, 70] }),
		] };
		const out = await desk.computer_use(turn, { tool: "computer_toolset_20260801", display: [w, h] });
		assert.ok(out instanceof m.ComputerUseAnswer);
		assert.deepEqual([out.ran, out.failed], [1, 2]); // failed: its index in content
		assert.match(out.error, /coordinate/);
		// The vendor's JSON exactly: what the loop sends back, nothing of ours.
		assert.deepEqual(Object.keys(JSON.parse(JSON.stringify(out))).sort(), ["content", "role"]);
		assert.equal(out.role, "user");
		assert.deepEqual(out.content.map((r) => [r.tool_use_id, r.toolset_name, Boolean(r.is_error)]),
			[["toolu_a", "computer", false], ["toolu_b", "computer", true], ["toolu_c", "computer", true]]);
		assert.equal(out.content[0].content[0].text, "Moved the mouse.");
		assert.match(out.content[1].content[0].text, /coordinate/);
		assert.match(out.content[2].content[0].text, /^Not executed/);
		// The first ran, scaled to the screen ((2a+1)·s / 2d); the click did not.
		assert.deepEqual(await cursor(), at(40, 50));
		// OpenAI's GA tool: actions[] in one computer_call, the display as "WxH".
		const oa = await desk.computer_use({ type: "computer_call", call_id: "call_1", actions: [
			{ type: "move", x: 10, y: 20 }, { type: "move", x: 11, y: 21 }] }, { tool: "computer", display: `${w}x${h}` });
		assert.deepEqual([oa.type, oa.call_id, oa.output.type, oa.ran, oa.failed, oa.error],
			["computer_call_output", "call_1", "computer_screenshot", 2, null, null]);
		assert.deepEqual(await cursor(), at(11, 21));
		await assert.rejects(desk.computer_use(turn, { tool: "computer_9999" }), (e) =>
			e instanceof m.InvalidParameter && e.param === "tool");
	});

	test("previews: a server in a sandbox through its URL, the token becoming the host's cookie", async () => {
		const m = sdk.mod;
		await sand.write_file("/tmp/www/index.html", "<p>served in the sandbox</p>");
		await sand.bash("(setsid python3 -m http.server 8123 --bind 127.0.0.1 --directory /tmp/www >/tmp/www.log 2>&1 &)");
		const p = await sand.preview(8123, { ttl_s: 120 });
		const host = `8123-${sand.id}.localhost:${srv.previewPort}`;
		assert.ok(p.url.startsWith(`http://${host}/?cubicle_token=`), p.url);
		assert.deepEqual([p.port, p.public, typeof p.expires_at], [8123, false, "string"]);
		// The first request brings the token: a redirect to the URL without
		// it, and a cookie of that host only.
		const first = await previewGet(p.url);
		assert.equal(first.status, 302);
		assert.equal(new URL(first.headers.location, `http://${host}/`).href, `http://${host}/`);
		const cookie = first.headers["set-cookie"][0];
		assert.match(cookie, /^cubicle_preview=[^;]+;.*HttpOnly/);
		assert.doesNotMatch(cookie, /Domain=/i);
		const jar = { Cookie: cookie.split(";")[0] };
		const page = await until(async () => {
			const r = await previewGet(`http://${host}/`, jar);
			return r.status === 200 && r;
		}, "the sandbox's server through its preview");
		assert.match(page.body, /served in the sandbox/);
		assert.equal((await previewGet(`http://${host}/`)).status, 401); // no cookie, no token
		// Another port: its own URL; listed, revoked.
		const other = await sand.preview_url(8124);
		assert.equal(new URL(other).host, `8124-${sand.id}.localhost:${srv.previewPort}`);
		assert.deepEqual((await sand.previews()).map((x) => x.port).sort(), [8123, 8124]);
		assert.deepEqual(await sand.revoke_preview(8124), { ok: true, id: sand.id, port: 8124 });
		assert.deepEqual((await sand.previews()).map((x) => x.port), [8123]);
		assert.equal((await previewGet(`http://${host}/`, jar)).status, 200);
		await sand.revoke_preview(8123);
		assert.equal((await previewGet(`http://${host}/`, jar)).status, 403);
		await assert.rejects(sand.preview(0), (e) => e instanceof m.InvalidParameter && e.param === "port");
		await assert.rejects(sand.cdp(), m.Conflict); // a sandbox has no desktop browser
	});

	test("cdp: the desktop's Chromium through cubicled", async () => {
		const c = await desk.cdp({ ttl_s: 60 });
		assert.match(c.ws_url, new RegExp(`^ws://127\\.0\\.0\\.1:${srv.previewPort}/cdp/[^/]+/devtools/browser/`));
		assert.equal(typeof c.started, "boolean");
		const v = await (await fetch(`${c.http_url}/json/version`)).json();
		assert.match(v.Browser, /Chrom/);
		assert.ok(v.webSocketDebuggerUrl.startsWith(`ws://127.0.0.1:${srv.previewPort}/cdp/`), v.webSocketDebuggerUrl);
		assert.equal((await desk.cdp()).started, false); // the same browser, reused
	});

	test("recordings: started, stopped, downloaded as WebM bytes, with the track of its actions", async () => {
		const m = sdk.mod;
		const size = await desk.get_screen_size();
		const r = await desk.start_recording();
		assert.deepEqual([r.state, r.keep, r.width, r.height], ["recording", false, size.width, size.height]);
		await desk.move_cursor(7, 8);
		assert.deepEqual((await desk.recordings()).map((x) => x.id), [r.id]);
		const done = await desk.stop_recording(r.id, { keep: true });
		assert.deepEqual([done.id, done.state, done.keep, done.actions], [r.id, "stopped", true, 1]);
		const track = await desk.recording_actions(r.id);
		assert.equal(track.recording.id, r.id);
		assert.deepEqual(track.actions.map((a) => [a.action, a.params, a.status]), [["move_cursor", { x: 7, y: 8 }, 200]]);
		const webm = await desk.download_recording(r.id);
		assert.ok(webm instanceof Uint8Array);
		assert.deepEqual([...webm.subarray(0, 4)], [0x1a, 0x45, 0xdf, 0xa3]); // EBML
		assert.ok(Buffer.from(webm.subarray(0, 64)).includes("webm"), "DocType webm");
		assert.equal(webm.length, done.bytes);
		const local = path.join(tmp, "rec.webm");
		assert.equal(await desk.download_recording(r.id, local), done.bytes);
		assert.deepEqual(new Uint8Array(readFileSync(local)), webm);
		assert.deepEqual(await desk.delete_recording(r.id), { id: r.id, deleted: true });
		await assert.rejects(desk.recording_actions(r.id), m.NotFound);
		await assert.rejects(sand.start_recording(), m.Conflict);
	});

	test("templates: built with its log followed, a computer from it, delete refused while in use, a failed build", async () => {
		const m = sdk.mod;
		const seen = [];
		// test_sdk.py's recipe: a cache hit when that suite ran first.
		const t = await client.templates.create("sdk-js-tpl", {
			apt: ["jq"], run: ["echo from-the-sdk"], files: { "/etc/sdk-motd": "made by the sdk\n" },
			on_log: (text) => seen.push(text),
		});
		assert.deepEqual([t.state, t.name], ["ready", "sdk-js-tpl"]);
		// Or a layer hit whose image is made again over this checkout's base.
		assert.ok(seen.some((x) => /step|cache hit|layer tpl-layer-\w+ is in the cache/.test(x)), seen.join(""));
		assert.ok((await client.templates.list()).some((x) => x.name === "sdk-js-tpl"));
		const c = await m.Computer.create({ template: "sdk-js-tpl", client });
		try {
			assert.equal(c.kind, "sandbox");
			assert.equal((await c.bash("cat /etc/sdk-motd; jq -n 7")).stdout, "made by the sdk\n7\n");
			await assert.rejects(client.templates.delete("sdk-js-tpl"), m.Conflict);
		} finally {
			await c.delete();
		}
		await client.templates.delete("sdk-js-tpl");
		await assert.rejects(client.templates.get("sdk-js-tpl"), m.NotFound);
		await assert.rejects(client.templates.create("sdk-js-bad", { run: ["exit 4"] }), (e) =>
			e instanceof m.TemplateFailed && /exit code 4/.test(e.message));
		await client.templates.delete("sdk-js-bad");
		await assert.rejects(client.templates.create("bad name", { run: ["true"] }), (e) =>
			e instanceof m.InvalidParameter && e.param === "name");
	});

	test("stop, start, wait, delete (Symbol.asyncDispose)", async () => {
		await desk.stop();
		assert.ok(["stopping", "stopped"].includes(desk.state), desk.state);
		await desk.wait("stopped", 60);
		await assert.rejects(desk.left_click(1, 1), sdk.mod.Conflict);
		await desk.start();
		await desk.wait("running", 120);
		assert.equal((await desk.refresh()).state, "running");
		await desk[Symbol.asyncDispose](); // what `await using` calls
		assert.equal(desk.state, "deleted");
		await desk[Symbol.asyncDispose](); // a second time: already gone, no error
		assert.equal((await sdk.mod.Computer.get(desk.id, { client })).state, "deleted");
		await assert.rejects(desk.left_click(1, 1), sdk.mod.Conflict);
	});
});
