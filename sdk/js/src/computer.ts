/** A computer: its lifecycle and, made from the generated table, every action. */
import { install } from "./actions.js";
import type { Actions } from "./_table.js";
import { Client, defaultClient, type Upload } from "./client.js";
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

export interface ComputerUseOptions {
  /** "anthropic" or "openai" (default: told by the input's shape). */
  dialect?: "anthropic" | "openai";
  /** The display the agent sees, "WIDTHxHEIGHT" (coordinates are scaled). */
  display?: string;
  screenshot_delay_ms?: number;
}

function pathOf(id: string, sub = ""): string {
  return "/v1/computers/" + encodeURIComponent(id) + sub;
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
    if (wait) c.checkRunning();
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

  private checkRunning(): void {
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
   * One Anthropic or OpenAI computer-use action, answered in its dialect's
   * shape: an Anthropic tool input ({"action": ...}) or tool_use block → a
   * tool_result block; an OpenAI action or computer_call → a
   * computer_call_output item (docs/api.md, Computer-use compatibility).
   */
  computer_use(input: JsonObject, o: ComputerUseOptions = {}): Promise<JsonObject> {
    return this.client.request("POST", pathOf(this.id, "/computer-use"), input,
      { dialect: o.dialect, display: o.display, screenshot_delay_ms: o.screenshot_delay_ms });
  }

  // ---- files: streamed through /files, any size -----------------------------------------

  /**
   * The file's bytes; or, with `to` (a WritableStream, or a local path on
   * Node), streams it there and answers the byte count.
   */
  read_file(path: string): Promise<Uint8Array>;
  read_file(path: string, to: WritableStream<Uint8Array> | string): Promise<number>;
  async read_file(path: string, to?: WritableStream<Uint8Array> | string): Promise<Uint8Array | number> {
    const stream = await this.read_file_stream(path);
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
