// A stand-in for cubicled's stream gateway, to test the embed page alone:
// an HTTP server on loopback that serves the built page with the URL layout
// cubicled uses, and on /v1/computers/{id}/stream either refuses (401/403
// before the upgrade, as the real gateway does) or upgrades to a WebSocket
// (subprotocol "binary") and speaks a tiny RFB 3.8 server: security None,
// a WIDTHxHEIGHT 32 bpp framebuffer of one solid colour sent with the Raw
// encoding (plus a small cursor shape), and a record of every message the
// client sends.
//
// It is test tooling, not a model of the real gateway: the end-to-end tests
// run the same page against cubicled and envd's real VNC server.
//
// Waiting: every change (a connection, a client message, a frame sent) is
// recorded and wakes gw.waitFor(predicate), so tests wait on conditions.

import { EventEmitter } from "node:events";
import { readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { createRequire } from "node:module";

import { WAIT_MS, webclientDir } from "./browser.mjs";

const { WebSocketServer } = createRequire(path.join(webclientDir, "package.json"))("ws");

// The headers cubicled should send with the page and its assets.
export const EMBED_HEADERS = {
	"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'self'",
	"Cache-Control": "no-cache",
	"Referrer-Policy": "no-referrer",
	"X-Content-Type-Options": "nosniff",
};

export const CONTENT_TYPES = {
	".html": "text/html; charset=utf-8",
	".js": "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".json": "application/json",
	".txt": "text/plain; charset=utf-8",
};

// Starts the fake gateway serving `dir` (an OUT_DIR of webclient/build).
// Options: computerId, token, width, height, colour ([r, g, b]).
export async function fakeGatewayStart(dir, opts = {}) {
	const gw = new FakeGateway(dir, opts);
	await gw.listen();
	return gw;
}

class FakeGateway extends EventEmitter {
	constructor(dir, { computerId = "c-test", token = "tok-good", width = 64, height = 48, colour = [0, 0, 0] } = {}) {
		super();
		this.setMaxListeners(0);
		this.dir = dir;
		this.computerId = computerId;
		this.token = token;
		this.width = width;
		this.height = height;
		this.colour = colour;
		// How the stream endpoint answers: "accept" checks the token and
		// upgrades; "deny" answers 401 whatever the token (an expired one);
		// "drop" closes the TCP connection unanswered (a server away);
		// "dropws" does that to upgrades only and answers plain GETs as
		// "accept" does (a WebSocket broken on the way, a good token).
		this.policy = "accept";
		this.upgrades = 0; // upgrade requests seen
		this.probes = 0; // plain GETs of the stream URL seen
		this.sessions = []; // RfbSession, one per accepted WebSocket
		this.seq = 0; // orders every recorded event across sessions
		this.wss = new WebSocketServer({
			noServer: true,
			handleProtocols: (protocols) => (protocols.has("binary") ? "binary" : false),
		});
		this.server = http.createServer((req, res) => this.onRequest(req, res));
		this.server.on("upgrade", (req, socket, head) => this.onUpgrade(req, socket, head));
	}

	listen() {
		return new Promise((resolve) => {
			this.server.listen(0, "127.0.0.1", () => {
				this.origin = `http://127.0.0.1:${this.server.address().port}`;
				resolve();
			});
		});
	}

	embedUrl(query = {}) {
		const q = new URLSearchParams({ token: this.token, ...query });
		return `${this.origin}/embed/${encodeURIComponent(this.computerId)}?${q}`;
	}

	changed() {
		this.emit("change");
	}

	// Resolves when predicate() is true, checking after every change.
	waitFor(predicate, what, timeout = WAIT_MS) {
		return new Promise((resolve, reject) => {
			const check = () => {
				let ok;
				try {
					ok = predicate();
				} catch (e) {
					finish(e);
					return;
				}
				if (ok) {
					finish(null, ok);
				}
			};
			const finish = (err, value) => {
				clearTimeout(timer);
				this.off("change", check);
				if (err) {
					reject(err);
				} else {
					resolve(value);
				}
			};
			const timer = setTimeout(
				() => finish(new Error(`fake gateway: timed out waiting for ${what}`)),
				timeout,
			);
			this.on("change", check);
			check();
		});
	}

	// The last accepted session.
	get session() {
		return this.sessions[this.sessions.length - 1];
	}

	// Which answer a stream request gets: null to go on, or [status, body].
	streamRefusal(url) {
		if (this.policy === "deny") {
			return [401, "token expired"];
		}
		const m = /^\/v1\/computers\/([^/]+)\/stream$/.exec(url.pathname);
		if (url.searchParams.get("token") !== this.token) {
			return [401, "bad token"];
		}
		if (decodeURIComponent(m[1]) !== this.computerId) {
			return [403, "token is for another computer"];
		}
		return null;
	}

	async onRequest(req, res) {
		const url = new URL(req.url, this.origin);
		if (/^\/v1\/computers\/[^/]+\/stream$/.test(url.pathname)) {
			this.probes++;
			this.changed();
			if (this.policy === "drop") {
				req.socket.destroy();
				return;
			}
			const refusal = this.streamRefusal(url);
			const [status, message] = refusal || [426, "this URL takes a WebSocket"];
			const body = JSON.stringify({ error: { code: String(status), message } });
			res.writeHead(status, { "Content-Type": "application/json", Connection: "close" });
			res.end(body);
			return;
		}
		const file = embedFileFor(url.pathname);
		if (req.method !== "GET" || !file) {
			res.writeHead(404, { "Content-Type": "text/plain" });
			res.end("not found\n");
			return;
		}
		let data;
		try {
			data = await readFile(path.join(this.dir, file));
		} catch {
			res.writeHead(404, { "Content-Type": "text/plain" });
			res.end("not found\n");
			return;
		}
		const type = CONTENT_TYPES[path.extname(file)] || "application/octet-stream";
		res.writeHead(200, { "Content-Type": type, "Content-Length": data.length, ...EMBED_HEADERS });
		res.end(data);
	}

	onUpgrade(req, socket, head) {
		const url = new URL(req.url, this.origin);
		if (!/^\/v1\/computers\/[^/]+\/stream$/.test(url.pathname)) {
			socket.destroy();
			return;
		}
		this.upgrades++;
		this.changed();
		if (this.policy === "drop" || this.policy === "dropws") {
			socket.destroy();
			return;
		}
		const refusal = this.streamRefusal(url);
		if (refusal) {
			const body = JSON.stringify({ error: { code: String(refusal[0]), message: refusal[1] } });
			socket.end(
				`HTTP/1.1 ${refusal[0]} ${http.STATUS_CODES[refusal[0]]}\r\n` +
					"Content-Type: application/json\r\n" +
					`Content-Length: ${Buffer.byteLength(body)}\r\n` +
					"Connection: close\r\n\r\n" +
					body,
			);
			return;
		}
		this.wss.handleUpgrade(req, socket, head, (ws) => {
			this.sessions.push(new RfbSession(this, ws));
			this.changed();
		});
	}

	async stop() {
		for (const s of this.sessions) {
			s.ws.terminate();
		}
		this.wss.close();
		this.server.closeAllConnections();
		await new Promise((resolve) => this.server.close(resolve));
	}
}

// Maps a request path to a file of the build output, as cubicled does:
//   /embed/assets/REST  ->  assets/REST   (no "..", no empty segments)
//   /embed/ID           ->  embed.html
function embedFileFor(pathname) {
	let m = /^\/embed\/assets\/(.+)$/.exec(pathname);
	if (m) {
		const parts = m[1].split("/");
		if (parts.some((p) => p === "" || p === "." || p === "..")) {
			return null;
		}
		return path.join("assets", ...parts);
	}
	m = /^\/embed\/([^/]+)$/.exec(pathname);
	if (m && m[1] !== "assets") {
		return "embed.html";
	}
	return null;
}

// One RFB 3.8 connection from the server side.
class RfbSession {
	constructor(gw, ws) {
		this.gw = gw;
		this.ws = ws;
		this.events = []; // { seq, type, ... } in arrival order
		this.stage = "version";
		this.buf = Buffer.alloc(0);
		this.colour = gw.colour;
		this.dirty = true; // the client has not seen the current colour
		this.pending = false; // an update request waits for a change
		this.closed = false;
		this.cursorSent = false;
		this.error = null;
		// The client's pixel format; the server's own until SetPixelFormat.
		this.pf = { bpp: 32, bigEndian: false, redMax: 255, greenMax: 255, blueMax: 255, redShift: 16, greenShift: 8, blueShift: 0 };
		ws.on("message", (data) => this.onData(data));
		ws.on("close", (code) => {
			this.closed = true;
			this.record({ type: "closed", code });
		});
		ws.send(Buffer.from("RFB 003.008\n"));
	}

	record(ev) {
		ev.seq = ++this.gw.seq;
		this.events.push(ev);
		this.gw.changed();
		return ev;
	}

	of(type) {
		return this.events.filter((e) => e.type === type);
	}

	fail(message) {
		this.error = new Error(`fake RFB server: ${message}`);
		this.record({ type: "error", message });
		this.ws.terminate();
	}

	onData(data) {
		this.buf = Buffer.concat([this.buf, data]);
		for (;;) {
			const n = this.parse();
			if (n === 0 || this.error) {
				return;
			}
			this.buf = this.buf.subarray(n);
		}
	}

	// Handles one complete client message at the head of the buffer and
	// returns its length, or 0 when more bytes are needed.
	parse() {
		const b = this.buf;
		switch (this.stage) {
			case "version":
				if (b.length < 12) return 0;
				if (b.toString("latin1", 0, 12) !== "RFB 003.008\n") {
					this.fail(`unexpected client version ${JSON.stringify(b.toString("latin1", 0, 12))}`);
					return 0;
				}
				this.ws.send(Buffer.from([1, 1])); // one security type: None
				this.stage = "security";
				return 12;
			case "security":
				if (b.length < 1) return 0;
				if (b[0] !== 1) {
					this.fail(`client chose security type ${b[0]}`);
					return 0;
				}
				this.ws.send(Buffer.from([0, 0, 0, 0])); // SecurityResult OK
				this.stage = "init";
				return 1;
			case "init": {
				if (b.length < 1) return 0;
				this.record({ type: "clientinit", shared: b[0] });
				const name = Buffer.from("cubicle fake");
				const si = Buffer.alloc(24 + name.length);
				si.writeUInt16BE(this.gw.width, 0);
				si.writeUInt16BE(this.gw.height, 2);
				// PIXEL_FORMAT: 32 bpp, depth 24, little endian, true colour,
				// maxima 255, shifts 16/8/0.
				Buffer.from([32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]).copy(si, 4);
				si.writeUInt32BE(name.length, 20);
				name.copy(si, 24);
				this.ws.send(si);
				this.stage = "normal";
				return 1;
			}
			default:
				return this.parseNormal(b);
		}
	}

	parseNormal(b) {
		if (b.length < 1) return 0;
		switch (b[0]) {
			case 0: // SetPixelFormat
				if (b.length < 20) return 0;
				this.pf = {
					bpp: b[4],
					bigEndian: b[6] !== 0,
					redMax: b.readUInt16BE(8),
					greenMax: b.readUInt16BE(10),
					blueMax: b.readUInt16BE(12),
					redShift: b[14],
					greenShift: b[15],
					blueShift: b[16],
				};
				if (this.pf.bpp !== 32 || b[7] !== 1) {
					this.fail(`pixel format ${this.pf.bpp} bpp, true colour ${b[7]}: only 32 bpp true colour is faked`);
					return 0;
				}
				this.record({ type: "pixelformat", ...this.pf });
				return 20;
			case 2: {
				// SetEncodings
				if (b.length < 4) return 0;
				const n = b.readUInt16BE(2);
				if (b.length < 4 + 4 * n) return 0;
				const list = [];
				for (let i = 0; i < n; i++) list.push(b.readInt32BE(4 + 4 * i));
				this.record({ type: "encodings", list });
				return 4 + 4 * n;
			}
			case 3: {
				// FramebufferUpdateRequest
				if (b.length < 10) return 0;
				const incremental = b[1] !== 0;
				this.record({ type: "request", incremental });
				if (!incremental || this.dirty) {
					this.sendFrame();
				} else {
					this.pending = true;
				}
				return 10;
			}
			case 4: // KeyEvent
				if (b.length < 8) return 0;
				this.record({ type: "key", down: b[1] !== 0, keysym: b.readUInt32BE(4) });
				return 8;
			case 5: // PointerEvent
				if (b.length < 6) return 0;
				this.record({ type: "pointer", mask: b[1], x: b.readUInt16BE(2), y: b.readUInt16BE(4) });
				return 6;
			case 6: {
				// ClientCutText
				if (b.length < 8) return 0;
				const len = b.readInt32BE(4);
				const n = Math.abs(len); // negative: extended clipboard
				if (b.length < 8 + n) return 0;
				this.record({ type: "cut", length: len });
				return 8 + n;
			}
			default:
				this.fail(`unexpected client message type ${b[0]}`);
				return 0;
		}
	}

	// A pixel of colour [r, g, b] in the client's pixel format.
	pixel([r, g, b]) {
		const pf = this.pf;
		return (
			((Math.round((r * pf.redMax) / 255) << pf.redShift) |
				(Math.round((g * pf.greenMax) / 255) << pf.greenShift) |
				(Math.round((b * pf.blueMax) / 255) << pf.blueShift)) >>>
			0
		);
	}

	putPixels(buf, offset, count, px) {
		for (let i = 0; i < count; i++) {
			if (this.pf.bigEndian) buf.writeUInt32BE(px, offset + 4 * i);
			else buf.writeUInt32LE(px, offset + 4 * i);
		}
	}

	// Sends the whole framebuffer in the current colour (Raw encoding), and
	// with the first frame a 4x4 white cursor shape (the Cursor
	// pseudo-encoding, -239) when the client asked for cursor shapes.
	sendFrame() {
		const { width, height } = this.gw;
		const enc = this.of("encodings").at(-1);
		const withCursor = !this.cursorSent && enc !== undefined && enc.list.includes(-239);
		const cursorBytes = withCursor ? 12 + 4 * 4 * 4 + 4 : 0;
		const msg = Buffer.alloc(4 + 12 + width * height * 4 + cursorBytes);
		msg[0] = 0; // FramebufferUpdate
		msg.writeUInt16BE(withCursor ? 2 : 1, 2); // rectangles
		msg.writeUInt16BE(0, 4);
		msg.writeUInt16BE(0, 6);
		msg.writeUInt16BE(width, 8);
		msg.writeUInt16BE(height, 10);
		msg.writeInt32BE(0, 12); // Raw
		this.putPixels(msg, 16, width * height, this.pixel(this.colour));
		if (withCursor) {
			const o = 16 + width * height * 4;
			msg.writeUInt16BE(1, o); // hot spot x, y
			msg.writeUInt16BE(1, o + 2);
			msg.writeUInt16BE(4, o + 4); // 4x4
			msg.writeUInt16BE(4, o + 6);
			msg.writeInt32BE(-239, o + 8);
			this.putPixels(msg, o + 12, 16, this.pixel([255, 255, 255]));
			msg.fill(0xf0, o + 12 + 64, o + 12 + 64 + 4); // mask: all 4 bits of each row
			this.cursorSent = true;
		}
		this.dirty = false;
		this.pending = false;
		this.ws.send(msg);
		return this.record({ type: "frame", colour: this.colour, cursor: withCursor });
	}

	// Changes the desktop's colour; the client gets it on its next (or
	// already waiting) update request. Returns the frame event when sent
	// at once, else null.
	setColour(rgb) {
		this.colour = rgb;
		this.dirty = true;
		return this.pending ? this.sendFrame() : null;
	}

	// Resolves once the client has asked for an update after having seen a
	// frame of colour `rgb`: every input message it sent before then is in
	// this.events by that time (one socket, in order).
	async barrierAfterColour(rgb, what = "an update request after the new frame") {
		const frame = await this.gw.waitFor(
			() => this.events.find((e) => e.type === "frame" && String(e.colour) === String(rgb)),
			`a frame of colour ${rgb}`,
		);
		await this.gw.waitFor(() => this.events.some((e) => e.type === "request" && e.seq > frame.seq), what);
	}

	close(code, reason) {
		this.ws.close(code, reason);
	}
}
