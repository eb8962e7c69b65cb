// bench/sdk.py's Node side: reads "N\n" lines on stdin and, for each, times
// N left_clicks through the TypeScript SDK (sdk/js/dist) and N through raw
// fetch (one kept-alive undici connection pool, as the SDK's), interleaved;
// answers one JSON line {"sdk": [ms...], "fetch": [ms...]}.
import { createInterface } from "node:readline";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [url, key, id, dist] = process.argv.slice(2);
const { Client, Computer } = await import(pathToFileURL(path.join(dist, "index.js")).href);
const client = new Client({ url, api_key: key });
const desk = await Computer.get(id, { client });
const target = (i) => [200 + ((i * 37) % 800), 200 + ((i * 53) % 400)];
const endpoint = `${url}/v1/computers/${id}/actions/left_click`;
const headers = { Authorization: "Bearer " + key, "Content-Type": "application/json" };

async function raw(i) {
	const [x, y] = target(i);
	const r = await fetch(endpoint, { method: "POST", headers, body: JSON.stringify({ x, y }) });
	await r.json();
	if (r.status !== 200) throw new Error("status " + r.status);
}
const sdk = (i) => desk.left_click(...target(i));

for (let i = 0; i < 20; i++) {
	await raw(i);
	await sdk(i);
}
let k = 0;
for await (const line of createInterface({ input: process.stdin })) {
	const n = Number(line);
	const out = { sdk: [], fetch: [] };
	for (let i = 0; i < n; i++, k++) {
		for (const [name, fn] of [["fetch", raw], ["sdk", sdk]]) {
			const t = performance.now();
			await fn(k);
			out[name].push(performance.now() - t);
		}
	}
	process.stdout.write(JSON.stringify(out) + "\n");
}
