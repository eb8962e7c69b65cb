// Runs the built cubicled on a free loopback port with a fresh state
// directory, for node tests (the JavaScript twin of cubicled.py), and a
// small client for its REST API.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
export const build = process.env.CUBICLE_BUILD || path.join(repoRoot, "build");

export class Cubicled {
	constructor(args = []) {
		this.args = args;
		this.admin = "ck_admin_" + Math.random().toString(16).slice(2).padEnd(24, "0");
	}

	async start() {
		this.state = mkdtempSync(path.join(os.tmpdir(), "cub-node-"));
		this.proc = spawn(
			path.join(build, "bin", "cubicled"),
			[
				"--listen",
				"127.0.0.1:0",
				"--state-dir",
				this.state,
				"--images",
				process.env.CUBICLE_IMAGES || path.join(build, "images"),
				...this.args,
			],
			{ env: { ...process.env, CUBICLE_ADMIN_KEY: this.admin }, stdio: ["ignore", "pipe", "ignore"] },
		);
		const line = await new Promise((resolve, reject) => {
			let buf = "";
			this.proc.stdout.on("data", (d) => {
				buf += d;
				if (buf.includes("\n")) {
					resolve(buf);
				}
			});
			this.proc.on("exit", (c) => reject(new Error("cubicled exited " + c)));
		});
		this.port = line.split("listening on ")[1].split(" ")[0].split(":").pop().trim();
		this.base = `http://127.0.0.1:${this.port}`;
		// Previews and CDP: a listener of their own.
		const m = line.match(/previews tcp:[^:]+:(\d+)/);
		this.previewPort = m ? Number(m[1]) : null;
		return this;
	}

	// A REST call; throws on a non-2xx status. Returns the parsed JSON.
	async api(method, p, body, key = this.admin) {
		const r = await fetch(this.base + p, {
			method,
			headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
			body: body === undefined ? undefined : JSON.stringify(body),
		});
		const text = await r.text();
		let json = null;
		try {
			json = JSON.parse(text);
		} catch {
			/* not JSON */
		}
		if (!r.ok) {
			throw new Error(`${method} ${p} -> ${r.status} ${text.slice(0, 300)}`);
		}
		return json;
	}

	// A new workspace and its key: { ws, key }.
	async workspace(name) {
		const ws = (await this.api("POST", "/v1/workspaces", { name })).id;
		const key = (await this.api("POST", `/v1/workspaces/${ws}/keys`)).key;
		return { ws, key };
	}

	// Deletes every computer (so nothing leaks), stops cubicled, removes its state.
	async stop() {
		if (this.proc && this.proc.exitCode === null) {
			const list = await this.api("GET", "/v1/computers").catch(() => ({ computers: [] }));
			for (const c of list.computers) {
				await this.api("DELETE", `/v1/computers/${c.id}`).catch(() => {});
			}
			const exited = new Promise((r) => this.proc.on("exit", r));
			this.proc.kill("SIGTERM");
			await exited;
		}
		if (this.state) {
			rmSync(this.state, { recursive: true, force: true });
		}
	}
}

// Polls fn until it returns something truthy (or throws past the timeout).
export async function until(fn, what, timeout = 30000) {
	const end = Date.now() + timeout;
	let last;
	while (Date.now() < end) {
		try {
			const v = await fn();
			if (v) {
				return v;
			}
		} catch (e) {
			last = e;
		}
		await new Promise((r) => setTimeout(r, 50));
	}
	throw new Error(`timed out waiting for ${what}${last ? ` (${last.message})` : ""}`);
}
