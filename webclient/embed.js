// The embed page's logic: connect noVNC to cubicled's stream gateway for the
// computer named in the path (/embed/{id}) with the token from the query
// (?token=...&view_only=1), keep the connection up while the token lets it,
// and say what is happening.
//
// The state is shown to people in #status and to tests as
// document.body.dataset.state:
//   connecting    a connection is being opened (first time or again)
//   connected     the desktop is live
//   disconnected  the stream ended or the server is unreachable; retrying
//   denied        the gateway refused this link (bad, forged or expired
//                 token, or a stopped or deleted computer); final
//
// Why a probe: the gateway refuses a bad token with 401/403 before the
// WebSocket upgrade, and a browser hides that status: a refused WebSocket
// and an unreachable server look alike. So when a WebSocket fails to open,
// the page asks the same URL once with a plain GET, which the gateway
// answers like the upgrade: 401/403 for a token it refuses (404/410 for a
// computer that is gone), anything else (426) for a good one. A refusal is
// final ("denied"); anything else, or no answer at all, is retried.
//
// noVNC gets a WebSocket made here, not a URL, so the page sees whether the
// socket ever opened and with which close code it ended.

import RFB from "./novnc/core/rfb.js";

// Close codes the gateway may send to end a stream for good (no reconnect):
// 4401/4403 like the HTTP statuses, e.g. when the stream is revoked.
const CLOSE_FINAL = new Set([4401, 4403]);

// Reconnect delays: 0.5 s doubling to 8 s. A token's lifetime (a minute by
// default) bounds how long the retries go on: once it has expired the
// gateway refuses and the page says so.
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;

const screenEl = document.getElementById("screen");
const statusEl = document.getElementById("status");

const link = embed_link_parse(location);
let everConnected = false;
let retries = 0;

// Reads the computer id, token and view-only flag from the page's address.
function embed_link_parse(loc) {
	const m = /^\/embed\/([^/]+)\/?$/.exec(loc.pathname);
	const q = new URLSearchParams(loc.search);
	const id = m ? decodeURIComponent(m[1]) : "";
	const token = q.get("token") || "";
	const v = (q.get("view_only") || "").toLowerCase();
	const viewOnly = v === "1" || v === "true" || v === "yes";
	const path = `/v1/computers/${encodeURIComponent(id)}/stream?token=${encodeURIComponent(token)}`;
	const ws = loc.protocol === "https:" ? "wss:" : "ws:";
	return {
		id,
		token,
		viewOnly,
		wsUrl: `${ws}//${loc.host}${path}`,
		httpUrl: `${loc.protocol}//${loc.host}${path}`,
	};
}

function embed_state_set(state, text) {
	document.body.dataset.state = state;
	statusEl.textContent = text;
}

function embed_deny(text) {
	embed_state_set("denied", text || "Access denied or link expired.");
}

// Asks the stream URL with a plain GET why the WebSocket did not open.
// Returns the HTTP status, or 0 when the server could not be reached.
async function embed_probe() {
	try {
		const r = await fetch(link.httpUrl, {
			cache: "no-store",
			credentials: "omit",
			redirect: "manual",
		});
		return r.status;
	} catch (e) {
		return 0;
	}
}

function embed_retry(text) {
	const delay = Math.min(RETRY_FIRST_MS * 2 ** retries, RETRY_MAX_MS);
	retries++;
	embed_state_set("disconnected", text);
	setTimeout(embed_connect, delay);
}

// Statuses of the probe that mean the link will never work.
const PROBE_REFUSED = new Set([401, 403, 404, 410]);

// A WebSocket that never opened: denied, or retry?
async function embed_failed_open() {
	const status = await embed_probe();
	if (PROBE_REFUSED.has(status)) {
		embed_deny();
	} else if (status === 0) {
		embed_retry("Cannot reach the server. Retrying…");
	} else {
		embed_retry(`The stream did not open (the server answered ${status}). Retrying…`);
	}
}

function embed_connect() {
	embed_state_set("connecting", everConnected ? "Reconnecting…" : "Connecting…");

	let ws;
	try {
		ws = new WebSocket(link.wsUrl, ["binary"]);
	} catch (e) {
		embed_deny(`Cannot open the stream: ${e.message}`);
		return;
	}
	let opened = false;
	let connected = false;
	let closeCode = 0;
	let closeReason = "";
	let problem = "";
	ws.addEventListener("open", () => {
		opened = true;
	});
	ws.addEventListener("close", (e) => {
		closeCode = e.code;
		closeReason = e.reason;
	});

	const rfb = new RFB(screenEl, ws, { shared: true });
	rfb.scaleViewport = true;
	rfb.resizeSession = false;
	rfb.clipViewport = false;
	rfb.viewOnly = link.viewOnly;
	rfb.focusOnClick = !link.viewOnly;
	rfb.background = "#000";

	rfb.addEventListener("connect", () => {
		connected = true;
		everConnected = true;
		retries = 0;
		embed_state_set("connected", link.viewOnly ? "Connected (view only)." : "Connected.");
	});
	rfb.addEventListener("securityfailure", (e) => {
		problem = `The desktop refused the connection: ${e.detail.reason || "security failure"}.`;
	});
	rfb.addEventListener("credentialsrequired", () => {
		problem = "The desktop asked for a password this page does not have.";
		rfb.disconnect();
	});
	rfb.addEventListener("disconnect", () => {
		// The socket's close event may come after noVNC's disconnect.
		setTimeout(() => embed_ended(opened, connected, closeCode, closeReason, problem), 0);
	});
}

function embed_ended(opened, connected, closeCode, closeReason, problem) {
	if (CLOSE_FINAL.has(closeCode)) {
		embed_deny(closeReason ? `Access ended: ${closeReason}.` : undefined);
	} else if (problem) {
		embed_deny(problem);
	} else if (!opened) {
		embed_failed_open();
	} else if (connected) {
		embed_retry("Disconnected. Reconnecting…");
	} else {
		embed_retry("The desktop did not answer. Retrying…");
	}
}

if (link.viewOnly) {
	document.body.classList.add("view-only");
}
if (!link.id || !link.token) {
	embed_deny("This link is incomplete: it needs /embed/{id}?token=….");
} else {
	embed_connect();
}
