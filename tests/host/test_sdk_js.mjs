// The TypeScript SDK (sdk/js) as it ships: packed with `npm pack` (its
// prepack builds it with tsc), unpacked into a temporary node_modules and
// imported from there, then its whole surface against a real cubicled and
// a real desktop computer: Computer.create, every action of
// spec/actions.json as a method, typed errors, files streamed both ways,
// run, stream URLs, computer-use, connect tokens, usage; and the README's
// agent loop type-checked against the shipped .d.ts.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, openAsBlob, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";

import { Cubicled, repoRoot } from "./cubicled.mjs";

const sdkDir = path.join(repoRoot, "sdk", "js");
const spec = JSON.parse(readFileSync(path.join(repoRoot, "spec", "actions.json"), "utf8"));

let tmp, sdk, srv, client, desk, ws, key;

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
	desk = await sdk.mod.Computer.create({ kind: "desktop", client, idle_timeout_s: 600 });
});

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
			"computer_use", "stop", "start", "delete", "refresh", "wait", "action", "action_raw"]) {
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
