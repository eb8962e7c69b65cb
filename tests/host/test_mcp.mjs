// cubicled's /mcp driven by the official MCP TypeScript SDK client (a client
// nobody here wrote), over Streamable HTTP with a workspace API key, against
// a real desktop computer in a container. Raw HTTP checks of the transport
// rules (405, 403, 400, 202) follow.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Cubicled, repoRoot } from "./cubicled.mjs";

// The SDK, from webclient/node_modules (webclient/build runs npm ci).
const require = createRequire(path.join(repoRoot, "webclient", "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { LATEST_PROTOCOL_VERSION } = require("@modelcontextprotocol/sdk/types.js");

let srv, key, otherKey, client, other, computer;

async function connect(k) {
	const c = new Client({ name: "cubicle-test", version: "1.0.0" });
	const transport = new StreamableHTTPClientTransport(new URL(srv.base + "/mcp"), {
		requestInit: { headers: { Authorization: "Bearer " + k } },
	});
	await c.connect(transport);
	return c;
}

// A tool call's structured answer; fails the test on isError.
async function call(name, args, c = client) {
	const r = await c.callTool({ name, arguments: args });
	assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
	return r;
}

// A tool call that must fail as a tool (isError), not as a transport: its text.
async function callFails(name, args, c = client) {
	const r = await c.callTool({ name, arguments: args });
	assert.equal(r.isError, true, `${name} should fail: ${JSON.stringify(r)}`);
	assert.equal(r.content[0].type, "text");
	return r.content[0].text;
}

// Width and height from a PNG's IHDR.
function pngSize(buf) {
	assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
	assert.equal(buf.subarray(12, 16).toString(), "IHDR");
	return [buf.readUInt32BE(16), buf.readUInt32BE(20)];
}

before(async () => {
	srv = await new Cubicled(["--mcp-origins", "https://agent.example,http://localhost:5173"]).start();
	key = (await srv.workspace("mcp")).key;
	otherKey = (await srv.workspace("other")).key;
	client = await connect(key);
	other = await connect(otherKey);
});

after(async () => {
	await client?.close();
	await other?.close();
	await srv?.stop();
});

describe("the SDK client", () => {
	test("initialize negotiates the SDK's newest revision and tools", () => {
		assert.equal(client.getServerVersion().name, "cubicle");
		assert.ok(client.getServerCapabilities().tools);
		assert.equal(client.transport.protocolVersion, LATEST_PROTOCOL_VERSION);
		assert.match(client.getInstructions(), /create_computer/);
	});

	test("tools/list gives precise schemas", async () => {
		const { tools } = await client.listTools();
		const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
		for (const name of [
			"create_computer", "list_computers", "get_computer", "stop_computer", "start_computer",
			"delete_computer", "screenshot", "left_click", "type", "key", "hotkey", "scroll",
			"drag", "move_cursor", "windows", "get_accessibility_tree", "bash", "python",
			"read_file", "write_file", "stream_url", "preview_url", "cdp_url", "get_cursor_position",
			"start_recording", "stop_recording", "computer_use", "list_templates",
		]) {
			assert.ok(byName[name], `no tool ${name}`);
			assert.equal(byName[name].inputSchema.type, "object");
			assert.equal(byName[name].inputSchema.additionalProperties, false, name);
		}
		const click = byName.left_click.inputSchema;
		assert.deepEqual(click.required, ["computer_id"]);
		assert.deepEqual(click.properties.x, {
			type: "integer", minimum: 0, maximum: 1000000, description: click.properties.x.description,
		});
		assert.deepEqual(click.dependentRequired, { x: ["y"], y: ["x"] });
		assert.deepEqual(byName.scroll.inputSchema.properties.direction.enum, ["up", "down", "left", "right"]);
		assert.deepEqual(byName.bash.inputSchema.required, ["computer_id", "command"]);
		assert.equal(byName.create_computer.inputSchema.properties.template.type, "string");
		assert.equal(byName.bash.inputSchema.properties.timeout_s.maximum, 86400);
		assert.deepEqual(byName.create_computer.inputSchema.properties.kind.enum, ["desktop", "sandbox"]);
		assert.deepEqual(byName.create_computer.inputSchema.required, []);
		assert.deepEqual(byName.hotkey.inputSchema.properties.keys.items, { type: "string" });
		assert.equal(byName.delete_computer.annotations.destructiveHint, true);
		assert.equal(byName.screenshot.annotations.readOnlyHint, true);
	});

	test("a desktop: create, screenshot, click, bash, stream, delete", async () => {
		const created = await call("create_computer", { kind: "desktop", isolation: "container" });
		const c = created.structuredContent;
		assert.equal(c.state, "running");
		assert.deepEqual(c.resolution, [1280, 800]);
		computer = c.id;
		assert.equal(JSON.parse(created.content[0].text).id, computer);

		const shot = await call("screenshot", { computer_id: computer, max_width: 640 });
		const [image, note] = shot.content;
		assert.equal(image.type, "image");
		assert.equal(image.mimeType, "image/png");
		assert.deepEqual(pngSize(Buffer.from(image.data, "base64")), [640, 400]);
		assert.equal(note.type, "text");
		assert.match(note.text, /^640x400 image of a 1280x800 screen, scale 0\.5/);
		const full = await call("screenshot", { computer_id: computer });
		assert.deepEqual(pngSize(Buffer.from(full.content[0].data, "base64")), [1280, 800]);
		assert.match(full.content[1].text, /scale 1/);

		// computer_use through the official client: a toolset turn, the vendor's
		// answer as structuredContent, its screenshot as image content.
		const turn = await call("computer_use", {
			computer_id: computer, display: { width: 640, height: 400 }, call: { content: [
				{ type: "tool_use", id: "toolu_m1", name: "mouse_move", toolset_name: "computer", input: { coordinate: [160, 60] } },
				{ type: "tool_use", id: "toolu_m2", name: "screenshot", toolset_name: "computer", input: {} }] },
		});
		const [t1, t2] = turn.structuredContent.content;
		assert.deepEqual(t1, { type: "tool_result", tool_use_id: "toolu_m1", toolset_name: "computer", content: [{ type: "text", text: "Moved the mouse." }] });
		assert.equal(t2.content[0].source.data, turn.content[1].data);
		assert.deepEqual(pngSize(Buffer.from(turn.content[1].data, "base64")), [640, 400]);
		assert.match(turn.content[0].text, /^2 of 2 calls done/);

		const clicked = await call("left_click", { computer_id: computer, x: 321, y: 123 });
		assert.deepEqual([clicked.structuredContent.x, clicked.structuredContent.y], [321, 123]);
		const pos = await call("get_cursor_position", { computer_id: computer });
		assert.deepEqual([pos.structuredContent.x, pos.structuredContent.y], [321, 123]);

		const sh = await call("bash", { computer_id: computer, command: "echo hi from $(whoami); exit 3" });
		assert.equal(sh.structuredContent.exit_code, 3);
		assert.equal(sh.structuredContent.stdout, "hi from user\n");
		assert.equal(JSON.parse(sh.content[0].text).exit_code, 3);

		const py = await call("python", { computer_id: computer, code: "import sys; print(6 * 7); sys.exit(1)" });
		assert.deepEqual([py.structuredContent.stdout, py.structuredContent.exit_code], ["42\n", 1]);

		await call("write_file", { computer_id: computer, path: "note.txt", content: "héllo" });
		const rf = await call("read_file", { computer_id: computer, path: "note.txt" });
		assert.equal(rf.structuredContent.content, "héllo");

		const st = await call("stream_url", { computer_id: computer, ttl_s: 30, view_only: true });
		assert.match(st.structuredContent.embed_url, new RegExp(`^http://127\\.0\\.0\\.1:${srv.port}/embed/${computer}\\?token=`));

		const rec = await call("start_recording", { computer_id: computer });
		assert.equal(rec.structuredContent.state, "recording");
		await call("move_cursor", { computer_id: computer, x: 3, y: 4 });
		const recDone = await call("stop_recording", { computer_id: computer, recording_id: rec.structuredContent.id, keep: true });
		assert.deepEqual([recDone.structuredContent.state, recDone.structuredContent.keep, recDone.structuredContent.actions], ["stopped", true, 1]);
		assert.match(await callFails("stop_recording", { computer_id: computer, recording_id: "rec-nope" }), /not_found/);

		const listed = await call("list_computers", { state: "running" });
		assert.deepEqual(listed.structuredContent.computers.map((x) => x.id), [computer]);

		const stopped = await call("stop_computer", { computer_id: computer });
		assert.equal(stopped.structuredContent.state, "stopped");
		assert.match(await callFails("get_cursor_position", { computer_id: computer }), /conflict.*stopped/);
		const started = await call("start_computer", { computer_id: computer });
		assert.equal(started.structuredContent.state, "running");
		const got = await call("get_computer", { computer_id: computer });
		assert.equal(got.structuredContent.state, "running");
		const again = await call("read_file", { computer_id: computer, path: "note.txt" });
		assert.equal(again.structuredContent.content, "héllo"); // the disk was kept
	});

	test("failing calls are tool errors with the API's message", async () => {
		assert.ok(computer, "needs the desktop");
		let text = await callFails("bash", { computer_id: "c-0000000000000000", command: "true" });
		assert.match(text, /not_found.*no computer c-0000000000000000/);
		text = await callFails("get_computer", { computer_id: "../../etc" });
		assert.match(text, /not_found/);
		text = await callFails("left_click", { computer_id: computer, x: -5, y: 3 });
		assert.match(text, /invalid_parameter.*x: expected an integer in \[0, 1000000\]/);
		text = await callFails("left_click", { computer_id: computer, x: 5 });
		assert.match(text, /y: x and y go together/);
		text = await callFails("left_click", { computer_id: computer, x: 50000, y: 3 });
		assert.match(text, /x/); // envd's off-screen check, passed through
		text = await callFails("type", { computer_id: computer, text: "a", colour: "red" });
		assert.match(text, /colour: not a parameter of type/);
		text = await callFails("bash", { computer_id: computer });
		assert.match(text, /command: required/);
		text = await callFails("key", { computer_id: computer, key: "NoSuchKeyName" });
		assert.match(text, /NoSuchKeyName/);
		text = await callFails("create_computer", { kind: "sandbox", size: "huge" });
		assert.match(text, /size: one of/);
		text = await callFails("create_computer", { template: "no-such-template" });
		assert.match(text, /template: no template no-such-template/);
		// The built-in templates are listed to every workspace.
		const templates = (await call("list_templates", {})).structuredContent.templates;
		assert.ok(templates.some((t) => t.name === "data" && t.builtin), JSON.stringify(templates));
		// An unknown tool is a protocol error (JSON-RPC -32602), as the spec says.
		await assert.rejects(client.callTool({ name: "fly", arguments: {} }), (e) => e.code === -32602);
	});

	test("another workspace's key sees nothing of it", async () => {
		assert.ok(computer, "needs the desktop");
		const text = await callFails("get_computer", { computer_id: computer }, other);
		assert.match(text, /not_found/);
		await callFails("screenshot", { computer_id: computer }, other);
		const listed = await call("list_computers", {}, other);
		assert.deepEqual(listed.structuredContent.computers, []);
	});

	test("a wrong key fails the transport with 401", async () => {
		await assert.rejects(connect("ck_" + "0".repeat(48)), (e) => e.code === 401);
	});

	test("delete_computer", async () => {
		assert.ok(computer, "needs the desktop");
		const d = await call("delete_computer", { computer_id: computer });
		assert.equal(d.structuredContent.state, "deleted");
		const text = await callFails("screenshot", { computer_id: computer });
		assert.match(text, /deleted|no computer/);
	});
});

describe("the transport, raw", () => {
	const post = (body, headers = {}) =>
		fetch(srv.base + "/mcp", {
			method: "POST",
			headers: {
				Authorization: "Bearer " + key,
				"Content-Type": "application/json",
				Accept: "application/json, text/event-stream",
				...headers,
			},
			body: typeof body === "string" ? body : JSON.stringify(body),
		});

	test("GET and DELETE are 405 with Allow: POST", async () => {
		for (const method of ["GET", "DELETE"]) {
			const r = await fetch(srv.base + "/mcp", {
				method,
				headers: { Authorization: "Bearer " + key, Accept: "text/event-stream" },
			});
			assert.equal(r.status, 405, method);
			assert.equal(r.headers.get("allow"), "POST");
		}
	});

	test("a foreign Origin is 403, before the key is looked at; our own passes", async () => {
		let r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: "http://evil.example" });
		assert.equal(r.status, 403);
		r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: "http://evil.example", Authorization: "" });
		assert.equal(r.status, 403);
		r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: `http://127.0.0.1:${srv.port}` });
		assert.equal(r.status, 200);
		assert.deepEqual(await r.json(), { jsonrpc: "2.0", id: 1, result: {} });
		// --mcp-origins lists more, exactly.
		for (const origin of ["https://agent.example", "http://localhost:5173"]) {
			r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: origin });
			assert.equal(r.status, 200, origin);
		}
		for (const origin of ["https://agent.example.evil", "http://localhost:5174", "null"]) {
			r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: origin });
			assert.equal(r.status, 403, origin);
		}
		// A browser page there may read the answers (CORS), after a preflight
		// that carries no key.
		r = await post({ jsonrpc: "2.0", id: 1, method: "ping" }, { Origin: "https://agent.example" });
		assert.equal(r.headers.get("access-control-allow-origin"), "https://agent.example");
		const preflight = (origin) =>
			fetch(srv.base + "/mcp", {
				method: "OPTIONS",
				headers: {
					Origin: origin,
					"Access-Control-Request-Method": "POST",
					"Access-Control-Request-Headers": "authorization, content-type",
				},
			});
		r = await preflight("https://agent.example");
		assert.equal(r.status, 204);
		assert.equal(r.headers.get("access-control-allow-origin"), "https://agent.example");
		assert.match(r.headers.get("access-control-allow-headers"), /authorization/);
		assert.equal(r.headers.get("access-control-allow-methods"), "POST");
		assert.equal((await preflight("https://elsewhere.example")).status, 403);
	});

	test("notifications are 202 with no body; requests are JSON", async () => {
		let r = await post({ jsonrpc: "2.0", method: "notifications/initialized" });
		assert.equal(r.status, 202);
		assert.equal(await r.text(), "");
		r = await post({ jsonrpc: "2.0", id: "a", method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } } });
		assert.equal(r.status, 200);
		assert.match(r.headers.get("content-type"), /^application\/json/);
		const init = await r.json();
		assert.equal(init.id, "a");
		assert.equal(init.result.protocolVersion, "2025-06-18");
		r = await post({ jsonrpc: "2.0", id: 2, method: "initialize", params: { protocolVersion: "1999-01-01" } });
		assert.equal((await r.json()).result.protocolVersion, "2025-11-25");
	});

	test("protocol faults are JSON-RPC errors", async () => {
		let r = await post("{not json");
		assert.equal(r.status, 400);
		assert.equal((await r.json()).error.code, -32700);
		r = await post({ jsonrpc: "1.0", id: 1, method: "ping" });
		assert.equal((await r.json()).error.code, -32600);
		r = await post({ jsonrpc: "2.0", id: 7, method: "resources/list" });
		assert.equal(r.status, 200);
		assert.deepEqual((await r.json()).error.code, -32601);
		r = await post({ jsonrpc: "2.0", id: 8, method: "tools/call", params: { arguments: {} } });
		assert.equal((await r.json()).error.code, -32602);
		r = await post({ jsonrpc: "2.0", id: 9, method: "ping" }, { "MCP-Protocol-Version": "2024-01-01" });
		assert.equal(r.status, 400);
		r = await post({ jsonrpc: "2.0", id: 9, method: "ping" }, { Accept: "text/html" });
		assert.equal(r.status, 406);
		r = await post({ jsonrpc: "2.0", id: 9, method: "ping" }, { "Content-Type": "text/plain" });
		assert.equal(r.status, 415);
	});

	test("a batch answers its requests only", async () => {
		const r = await post([
			{ jsonrpc: "2.0", id: 1, method: "ping" },
			{ jsonrpc: "2.0", method: "notifications/initialized" },
			{ jsonrpc: "2.0", id: 2, method: "nope" },
		]);
		const out = await r.json();
		assert.deepEqual(out.map((m) => m.id), [1, 2]);
		assert.equal(out[1].error.code, -32601);
	});
});
