/** A computer: its lifecycle and, made from the generated table, every action. */
import { install } from "./actions.js";
import type { Actions } from "./_table.js";
import { Client, defaultClient, type Query, type Upload } from "./client.js";
import { ComputerFailed, Conflict, NotFound } from "./errors.js";
import type { JsonObject } from "./types.js";

export type Kind = "desktop" | "sandbox";
export type State = "provisioning" | "starting" | "running" | "stopping" | "stopped" |
  "deleting" | "deleted" | "error" | "offline";

export interface CreateOptions {
  kind?: Kind;
  size?: string;
  workspace?: string;
  isolation?: "container" | "vm";
  resolution?: [number, number];
  idle_timeout_s?: number;
  metadata?: Record<string, unknown>;
  session?: string;
  external_workspace_id?: string;
  /** A template's name (GET /v1/templates): the computer starts from its image. */
  template?: string;
  /** Answer once it runs (default true); ComputerFailed if it ends in error. */
  wait?: boolean;
  timeout_s?: number;
  client?: Client;
}

/** A stream token: {"token", "expires_at", "ws_url", "embed_url", "view_only"}. */
export interface StreamToken {
  token: string;
  expires_at: number;
  ws_url: string;
  embed_url: string;
  view_only: boolean;
}

/** A preview's URL: {"url", "expires_at", "port", "public"}. */
export interface Preview {
  /** http://PORT-ID.DOMAIN[:PORT]/?cubicle_token=…: the token becomes a
   * cookie of that host on the first request (none when public). */
  url: string;
  expires_at: string;
  port: number;
  public: boolean;
}

export interface PreviewOptions {
  /** How long the URL works (default 3600 s, at most cubicled's --preview-ttl-max). */
  ttl_s?: number;
  /** No token needed until it expires (cubicled must run with --public-previews). */
  public?: boolean;
}

/** The desktop browser's DevTools through cubicled (POST …/cdp). */
export interface Cdp {
  /** For Playwright's `chromium.connectOverCDP(ws_url)` or Puppeteer's `connect`. */
  ws_url: string;
  /** Its /json/version names a webSocketDebuggerUrl through cubicled. */
  http_url: string;
  expires_at: string;
  browser?: string;
  /** Chromium was started for this (false: the one that ran is reused). */
  started: boolean;
}

/** A screen recording (docs/api.md, Recordings). Times are Unix ms. */
export interface Recording {
  id: string;
  computer_id: string;
  workspace: string;
  state: "recording" | "stopped" | "failed";
  /** Kept after its computer is deleted. */
  keep: boolean;
  started_at: number;
  stopped_at: number | null;
  duration_ms: number;
  /** The WebM file's size (counted against the workspace's storage quota). */
  bytes: number;
  frames: number;
  /** Actions the API ran on the computer while it recorded. */
  actions: number;
  width: number;
  height: number;
  format: string;
  /** Why it ended. */
  reason?: "stopped" | "max_duration" | "max_bytes" | "storage_full" | "source_ended" | "error";
  error?: string;
}

/** One action of a recording's track. */
export interface RecordingAction {
  /** When it started, in ms of the video (its currentTime × 1000). */
  t_ms: number;
  duration_ms: number;
  action: string;
  /** Its parameters; a string over 256 bytes is cut ("...(N bytes)"). */
  params: JsonObject;
  /** The HTTP status of its answer. */
  status: number;
}

/** recording_actions(): the recording and what the API ran meanwhile. */
export interface RecordingTrack {
  recording: Recording;
  actions: RecordingAction[];
}

/** The tools[] entry a computer-use model was given (docs/computer-use.md). */
export type ComputerUseTool = "computer_toolset_20260801" | "computer_20251124" | "computer_20250124" |
  "computer_20241022" | "computer" | "computer_use_preview";

export interface ComputerUseOptions {
  /** The type of the tools[] entry the model was given (default: told by the input's shape). */
  tool?: ComputerUseTool;
  /** "anthropic" or "openai": the vendor, when `tool` does not say it. */
  dialect?: "anthropic" | "openai";
  /** The display the model sees: [width, height], {width, height} or
   * "WIDTHxHEIGHT" (screenshots are scaled to it, coordinates back). */
  display?: [number, number] | { width: number; height: number } | string;
  /** A pause before a screenshot that follows an action (0..10000). */
  screenshot_delay_ms?: number;
}

/**
 * What computer_use() answers: the vendor's JSON exactly (its own
 * enumerable properties: JSON.stringify gives what the loop sends back),
 * and how a batch went, from the answer's headers: `ran`, the calls done,
 * in order; `failed`, the index of the one that failed (in the turn's
 * content, or in actions[]), null if none; `error`, why.
 */
export class ComputerUseAnswer {
  [key: string]: any;
  declare readonly ran: number;
  declare readonly failed: number | null;
  declare readonly error: string | null;

  constructor(answer: JsonObject, headers: Headers) {
    Object.assign(this, answer);
    const ran = headers.get("x-computer-use-ran");
    const failed = headers.get("x-computer-use-failed");
    // Not enumerable: not part of the vendor's JSON.
    Object.defineProperties(this, {
      ran: { value: ran !== null ? Number(ran) : 1 },
      failed: { value: failed !== null ? Number(failed) : null },
      error: { value: headers.get("x-computer-use-error") },
    });
  }
}

function pathOf(id: string, sub = ""): string {
  return "/v1/computers/" + encodeURIComponent(id) + sub;
}

/** Bytes of a download, whole; or, with `to` (a WritableStream, or a local
 * path on Node), streamed there, answering the byte count. */
async function drain(stream: ReadableStream<Uint8Array>, to?: WritableStream<Uint8Array> | string): Promise<Uint8Array | number> {
  if (to === undefined) return new Uint8Array(await new Response(stream).arrayBuffer());
  let n = 0;
  const counted = stream.pipeThrough(new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, c) {
      n += chunk.byteLength;
      c.enqueue(chunk);
    },
  }));
  if (typeof to === "string") {
    // Node only: loaded when asked for, so the SDK itself needs no Node module.
    const fs = await import("node:fs");
    const { Writable } = await import("node:stream");
    await counted.pipeTo(Writable.toWeb(fs.createWriteStream(to)) as WritableStream<Uint8Array>);
  } else {
    await counted.pipeTo(to);
  }
  return n;
}

/**
 * One computer. Make it with Computer.create() or Computer.get(); its
 * methods are named exactly as the envd actions
 * (`await computer.left_click(10, 20)`).
 *
 * `await using c = await Computer.create()` deletes it when the block ends.
 */
export class Computer {
  client: Client;
  data: JsonObject;

  constructor(data: JsonObject, client?: Client) {
    this.client = client ?? defaultClient();
    this.data = data;
  }

  get id(): string {
    return this.data.id;
  }
  get state(): State | undefined {
    return this.data.state;
  }
  get kind(): Kind | undefined {
    return this.data.kind;
  }
  get size(): string | undefined {
    return this.data.size;
  }
  get workspace(): string | undefined {
    return this.data.workspace;
  }
  get metadata(): JsonObject | undefined {
    return this.data.metadata;
  }

  toString(): string {
    return `Computer(${this.id}, ${this.kind}, ${this.state})`;
  }

  // ---- lifecycle ----------------------------------------------------------------------

  /** Creates a computer; with wait (the default) answers once it runs. */
  static async create(o: CreateOptions = {}): Promise<Computer> {
    const client = o.client ?? defaultClient();
    const wait = o.wait ?? true;
    const body = Object.fromEntries(Object.entries({
      kind: o.kind ?? (o.template ? undefined : "desktop"), size: o.size,
      workspace: o.workspace, isolation: o.isolation,
      resolution: o.resolution, idle_timeout_s: o.idle_timeout_s, metadata: o.metadata,
      session: o.session, external_workspace_id: o.external_workspace_id,
      template: o.template,
    }).filter(([, v]) => v !== undefined));
    const query = wait ? { wait: "running", timeout_s: Math.trunc(o.timeout_s ?? 120) } : undefined;
    const c = new Computer(await client.request("POST", "/v1/computers", body, query), client);
    if (wait) c.#checkRunning();
    return c;
  }

  static async get(id: string, o: { client?: Client } = {}): Promise<Computer> {
    const client = o.client ?? defaultClient();
    return new Computer(await client.request("GET", pathOf(id)), client);
  }

  /** The computers the key sees, optionally filtered. */
  static async list(o: { state?: State; kind?: Kind; workspace?: string; client?: Client } = {}): Promise<Computer[]> {
    const client = o.client ?? defaultClient();
    const out = await client.request("GET", "/v1/computers", undefined,
      { state: o.state, kind: o.kind, workspace: o.workspace });
    return (out.computers as JsonObject[]).map((c) => new Computer(c, client));
  }

  #checkRunning(): void {
    if (this.state === "error") {
      throw new ComputerFailed("computer_failed",
        `computer ${this.id} failed: ${this.data.error || "unknown error"}`);
    }
    if (this.state !== "running") {
      throw new Conflict("conflict", `computer ${this.id} is ${this.state}`);
    }
  }

  /** Reloads the fields (state, last_activity_at, ...). */
  async refresh(): Promise<this> {
    this.data = await this.client.request("GET", pathOf(this.id));
    return this;
  }

  /** Waits until the computer reaches state (or error/deleted). */
  async wait(state: State = "running", timeout_s = 60): Promise<this> {
    this.data = await this.client.request("GET", pathOf(this.id), undefined,
      { wait: state, timeout_s: Math.trunc(timeout_s) });
    return this;
  }

  /** Stops the computer; its disk stays and billing at the running rate ends. */
  async stop(): Promise<this> {
    this.data = await this.client.request("POST", pathOf(this.id, "/stop"));
    return this;
  }

  async start(): Promise<this> {
    this.data = await this.client.request("POST", pathOf(this.id, "/start"));
    return this;
  }

  /** Deletes the computer, for good. */
  async delete(): Promise<this> {
    this.data = await this.client.request("DELETE", pathOf(this.id));
    return this;
  }

  /** For `await using`: deletes the computer (a missing one is fine). */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  /** A stream token, to watch (or control) the desktop live. */
  stream(o: { view_only?: boolean; ttl_s?: number } = {}): Promise<StreamToken> {
    return this.client.request("POST", pathOf(this.id, "/stream"),
      { view_only: Boolean(o.view_only), ttl_s: Math.trunc(o.ttl_s ?? 60) });
  }

  /** The embed page's URL (for a browser or an iframe), valid ttl_s seconds. */
  async stream_url(o: { view_only?: boolean; ttl_s?: number } = {}): Promise<string> {
    return (await this.stream(o)).embed_url;
  }

  /** Revokes every stream token issued so far and closes their streams. */
  revoke_streams(): Promise<JsonObject> {
    return this.client.request("POST", pathOf(this.id, "/stream/revoke"));
  }

  // ---- previews and CDP (docs/api.md, "Previews" and "CDP") ------------------------------

  /**
   * A URL that opens `port` of this computer in a browser, HTTP and
   * WebSocket: {"url", "expires_at", "port", "public"}. The URL carries a
   * token (it becomes a cookie of that host on the first request) unless
   * public (which cubicled must allow: --public-previews).
   */
  preview(port: number, o: PreviewOptions = {}): Promise<Preview> {
    const body: JsonObject = { port: Math.trunc(port) };
    if (o.ttl_s !== undefined) body.ttl_s = Math.trunc(o.ttl_s);
    if (o.public) body.public = true;
    return this.client.request("POST", pathOf(this.id, "/previews"), body);
  }

  /** Just the preview's URL. */
  async preview_url(port: number, o: PreviewOptions = {}): Promise<string> {
    return (await this.preview(port, o)).url;
  }

  /** This computer's previews that still work: [{"port", "public", "expires_at"}]. */
  async previews(): Promise<Omit<Preview, "url">[]> {
    return (await this.client.request("GET", pathOf(this.id, "/previews"))).previews;
  }

  /** Every URL of port's previews stops working; open connections close. */
  revoke_preview(port: number): Promise<{ ok: boolean; id: string; port: number }> {
    return this.client.request("DELETE", pathOf(this.id, `/previews/${Math.trunc(port)}`));
  }

  /**
   * The desktop browser's DevTools through cubicled (Chromium started or
   * reused): {"ws_url", "http_url", "expires_at", "browser", "started"};
   * ws_url is for Playwright's `chromium.connectOverCDP`.
   */
  cdp(o: { ttl_s?: number } = {}): Promise<Cdp> {
    return this.client.request("POST", pathOf(this.id, "/cdp"),
      o.ttl_s === undefined ? {} : { ttl_s: Math.trunc(o.ttl_s) });
  }

  // ---- recordings (docs/api.md, "Recordings") ---------------------------------------------

  /** Starts recording the screen (a running desktop); answers the recording
   * (state "recording") once its first picture is in. */
  start_recording(o: { keep?: boolean } = {}): Promise<Recording> {
    return this.client.request("POST", pathOf(this.id, "/recordings"), { keep: Boolean(o.keep) });
  }

  /** Stops it (the file is finished when this answers); `keep` keeps it after
   * the computer is deleted. Answers the recording. */
  stop_recording(recording_id: string, o: { keep?: boolean } = {}): Promise<Recording> {
    return this.client.request("POST", this.#recordingPath(recording_id, "/stop"),
      o.keep === undefined ? {} : { keep: Boolean(o.keep) });
  }

  /** The computer's recordings, oldest first. */
  async recordings(): Promise<Recording[]> {
    return (await this.client.request("GET", pathOf(this.id, "/recordings"))).recordings;
  }

  /** {"recording", "actions": [{"t_ms", "duration_ms", "action", "params",
   * "status"}]}: what the API ran while it recorded. */
  recording_actions(recording_id: string): Promise<RecordingTrack> {
    return this.client.request("GET", this.#recordingPath(recording_id, "/actions"));
  }

  /**
   * The WebM file's bytes; or, with `to` (a WritableStream, or a local path
   * on Node), streams it there and answers the byte count.
   */
  download_recording(recording_id: string): Promise<Uint8Array>;
  download_recording(recording_id: string, to: WritableStream<Uint8Array> | string): Promise<number>;
  async download_recording(recording_id: string, to?: WritableStream<Uint8Array> | string): Promise<Uint8Array | number> {
    return drain(await this.client.download(this.#recordingPath(recording_id)), to);
  }

  /** Deletes it (stopping it first if it records). */
  delete_recording(recording_id: string): Promise<{ id: string; deleted: boolean }> {
    return this.client.request("DELETE", this.#recordingPath(recording_id));
  }

  #recordingPath(recording_id: string, sub = ""): string {
    return pathOf(this.id, "/recordings/" + encodeURIComponent(recording_id) + sub);
  }

  // ---- actions ------------------------------------------------------------------------

  /** Runs any action with its parameters; answers its JSON. */
  async action(name: string, params: JsonObject = {}): Promise<JsonObject> {
    const resp = await this.client.raw("POST", pathOf(this.id, "/actions/" + name), { body: params });
    return resp.json();
  }

  /** Runs an action whose answer is bytes (screenshot). */
  async action_raw(name: string, params: JsonObject = {}): Promise<Uint8Array> {
    const resp = await this.client.raw("POST", pathOf(this.id, "/actions/" + name), { body: params });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /**
   * Runs what a computer-use model sent and answers what its loop sends
   * back, exactly (POST …/computer-use, docs/computer-use.md).
   *
   * `input`: an Anthropic tool_use block, assistant turn ({"content": [...]},
   * or the Messages API's answer as is) or computer input ({"action", ...});
   * an OpenAI computer_call item or action ({"type", ...}). `tool`: the
   * type of the tools[] entry the model was given (default: by the input's
   * shape); `dialect` may say the vendor instead. `display`: what the model
   * sees.
   *
   * The answer is a tool_result block, {"role": "user", "content":
   * [tool_result, ...]} for a turn, or a computer_call_output item: a
   * ComputerUseAnswer whose `ran`, `failed` and `error` say how a batch
   * went. A failure midway is in the answer (is_error results, "status":
   * "incomplete"), not an exception.
   */
  async computer_use(input: JsonObject, o: ComputerUseOptions = {}): Promise<ComputerUseAnswer> {
    const body: JsonObject = { ...input };
    const query: Query = { dialect: o.dialect, tool: o.tool, screenshot_delay_ms: o.screenshot_delay_ms };
    const d = o.display;
    if (typeof d === "string") query.display = d;
    else if (Array.isArray(d)) body.display = { width: Math.trunc(d[0]), height: Math.trunc(d[1]) };
    else if (d) body.display = { width: Math.trunc(d.width), height: Math.trunc(d.height) };
    const resp = await this.client.raw("POST", pathOf(this.id, "/computer-use"), { body, query });
    return new ComputerUseAnswer(await resp.json(), resp.headers);
  }

  // ---- files: streamed through /files, any size -----------------------------------------

  /**
   * The file's bytes; or, with `to` (a WritableStream, or a local path on
   * Node), streams it there and answers the byte count.
   */
  read_file(path: string): Promise<Uint8Array>;
  read_file(path: string, to: WritableStream<Uint8Array> | string): Promise<number>;
  async read_file(path: string, to?: WritableStream<Uint8Array> | string): Promise<Uint8Array | number> {
    return drain(await this.read_file_stream(path), to);
  }

  /** The file as a stream of bytes, as it arrives. */
  read_file_stream(path: string): Promise<ReadableStream<Uint8Array>> {
    return this.client.download(pathOf(this.id, "/files"), { path });
  }

  /**
   * Writes data to path, streamed: text (as UTF-8), bytes, a Blob (on Node,
   * `await fs.openAsBlob(local)` streams a local file of any size), or a
   * ReadableStream with its `length`. Answers {"ok", "path", "size"}.
   */
  write_file(path: string, data: Upload, o: { length?: number } = {}): Promise<JsonObject> {
    return this.client.upload(pathOf(this.id, "/files"), { path }, data, o.length);
  }
}

export interface Computer extends Actions {}
install(Computer);
