// The embed page in Debian's Chromium, as a command for tests in other
// languages (tests/host/test_byo.py): opens EMBED_URL, waits
// until it is connected and the canvas pixel at (X, Y) of the framebuffer is
// the colour RRGGBB, and prints the canvas's framebuffer size as JSON.
// Exits 1 with the reason (the page's state, the pixel it shows) otherwise.
//
//   node tests/browser/embed_pixel.mjs EMBED_URL X Y RRGGBB

import {
	browserLaunch,
	embedCanvasGeometry,
	embedWaitPixel,
	embedWaitState,
	gotoSteady,
} from "./browser.mjs";

const [url, x, y, hex] = process.argv.slice(2);
if (!url || !/^[0-9a-f]{6}$/i.test(hex || "")) {
	console.error("usage: embed_pixel.mjs EMBED_URL X Y RRGGBB");
	process.exit(2);
}
const rgb = [0, 2, 4].map((i) => parseInt(hex.slice(i, i + 2), 16));

const browser = await browserLaunch();
const seen = []; // what the page said, for the failure's message
let frame = null;
try {
	const page = await browser.newPage();
	page.on("console", (m) => seen.push(`console ${m.type()}: ${m.text()}`));
	page.on("requestfailed", (r) => seen.push(`failed ${r.url()}: ${r.failure()?.errorText}`));
	// The embed page itself, not iframed in a host page as the other browser
	// tests do: that host page is fulfilled by playwright, and Chromium's
	// local network access checks refuse its iframe to a private address
	// (the test's veth), as they would refuse a public site's.
	await page.setViewportSize({ width: 1280, height: 800 });
	await gotoSteady(page, url);
	frame = page;
	await embedWaitState(frame, "connected");
	await embedWaitPixel(frame, rgb, { x: Number(x), y: Number(y) });
	const g = await embedCanvasGeometry(frame);
	console.log(JSON.stringify({ width: g.width, height: g.height }));
} catch (e) {
	const at = frame ? `the frame at ${frame.url()}` : "no frame";
	console.error(`${e.message}\n${at}\n${seen.join("\n")}`);
	process.exitCode = 1;
} finally {
	await browser.close();
}
