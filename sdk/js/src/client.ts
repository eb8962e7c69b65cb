/**
 * The HTTP side: cubicled's REST API (docs/api.md) over the platform's
 * fetch (Node 20+: undici keeps connections alive), JSON in and out, files
 * streamed both ways as web streams. No dependencies.
 */
import { ConnectionFailed, CubicleError, fromAnswer } from "./errors.js";
import type { JsonObject } from "./types.js";
import { Templates } from "./templates.js";

export const DEFAULT_URL = "http://127.0.0.1:8080";

/** Query parameters; undefined and null ones are left out. */
export type Query = Record<string, string | number | boolean | undefined | null>;

/** What upload() and write_file() send: text (UTF-8), bytes, a Blob (a file
 * from `fs.openAsBlob` streams from disk), or a stream with its length. */
export type Upload = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

export interface ClientOptions {
  /** Default $CUBICLE_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** Default $CUBICLE_API_KEY. */
  api_key?: string | null;
  /** Per request (default 600000: a ?wait= may take minutes). */
  timeout_ms?: number;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

export interface RawOptions {
  body?: unknown;
  query?: Query;
  headers?: Record<string, string>;
  /** Bytes to send as they are (not JSON), with their length when a stream. */
  data?: Upload;
  length?: number;
}

/** A connection to cubicled. */
export class Client {
  readonly url: string;
  readonly api_key: string | null;
  readonly timeout_ms: number;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url ?? env("CUBICLE_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    this.api_key = opts.api_key !== undefined ? opts.api_key : env("CUBICLE_API_KEY") ?? null;
    this.timeout_ms = opts.timeout_ms ?? 600_000;
    let u: URL;
    try {
      u = new URL(this.url);
    } catch {
      throw new TypeError(`url: expected http(s)://HOST[:PORT], got ${JSON.stringify(this.url)}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new TypeError(`url: expected http(s)://HOST[:PORT], got ${JSON.stringify(this.url)}`);
    }
  }

  toString(): string {
    return `Client(${this.url})`;
  }

  /** The URL of path with query (absolute, for fetch). */
  href(path: string, query?: Query): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) q.set(k, String(v));
    }
    const s = q.toString();
    return this.url + path + (s ? "?" + s : "");
  }

  /**
   * One request; answers the Response (its body not yet read) and throws
   * the typed error for a 4xx/5xx answer.
   */
  async raw(method: string, path: string, o: RawOptions = {}): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.api_key) headers.Authorization = "Bearer " + this.api_key;
    let body: BodyInit | undefined;
    let duplex = false;
    if (o.data !== undefined) {
      headers["Content-Type"] = "application/octet-stream";
      const d = o.data;
      if (typeof d === "string") body = new TextEncoder().encode(d);
      else if (d instanceof ReadableStream) {
        if (o.length === undefined) {
          throw new TypeError("an upload from a stream needs its length (cubicled wants a Content-Length)");
        }
        headers["Content-Length"] = String(o.length);
        body = d;
        duplex = true;
      } else body = d as BodyInit;
    } else if (o.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(o.body);
    }
    Object.assign(headers, o.headers ?? {});
    const init: RequestInit & { duplex?: "half" } = {
      method, headers, body, signal: AbortSignal.timeout(this.timeout_ms),
    };
    if (duplex) init.duplex = "half";
    let resp: Response;
    try {
      resp = await fetch(this.href(path, o.query), init);
    } catch (e) {
      if (e instanceof CubicleError) throw e;
      const cause = (e as { cause?: { message?: string } }).cause?.message;
      throw new ConnectionFailed("unreachable",
        `cannot reach cubicled at ${this.url}: ${(e as Error).message}${cause ? ` (${cause})` : ""}`);
    }
    if (resp.status >= 400) {
      const text = await resp.text();
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      throw fromAnswer(resp.status, parsed, resp.headers.get("x-request-id"));
    }
    return resp;
  }

  /** A JSON request; answers the parsed JSON answer. */
  async request(method: string, path: string, body?: unknown, query?: Query): Promise<any> {
    const resp = await this.raw(method, path, { body, query });
    const text = await resp.text();
    return text ? JSON.parse(text) : null;
  }

  /** GET as a stream of bytes (a file, any size). */
  async download(path: string, query?: Query): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.raw("GET", path, { query });
    return resp.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /** PUT `source`, streamed (`length`: a stream's byte count); answers {"ok", "path", "size"}. */
  async upload(path: string, query: Query, source: Upload, length?: number): Promise<JsonObject> {
    const resp = await this.raw("PUT", path, { query, data: source, length });
    return resp.json();
  }

  // ---- the API beyond one computer ----------------------------------------------------

  /** Metered usage: {"computers": [...], "total": {...}, "runs": {...}} (docs/api.md). */
  usage(o: { workspace?: string; from?: string | number; to?: string | number } = {}): Promise<JsonObject> {
    return this.request("GET", "/v1/usage", undefined, { workspace: o.workspace, from: o.from, to: o.to });
  }

  /**
   * Runs a snippet in a fresh sandbox (POST /v1/run, docs/code-runner.md):
   * language "python" or "javascript" ("js" too); answers {"stdout",
   * "stderr", "exit_code", "error"?: {"type", "message"}, "cpu_ms",
   * "wall_ms", "memory_kb"}. A snippet that fails is not an exception
   * here: look at "error".
   */
  run(language: "python" | "javascript" | "js", code: string, o: { stdin?: string } = {}): Promise<JsonObject> {
    const body: JsonObject = { language: language === "js" ? "javascript" : language, code };
    if (o.stdin !== undefined) body.stdin = o.stdin;
    return this.request("POST", "/v1/run", body);
  }

  /**
   * A single-use token and the command that connects a machine you bring
   * (docs/byo.md): {"id", "token", "expires_at", "kind", "command"}.
   */
  connect_token(o: { kind?: "desktop" | "sandbox"; name?: string; ttl_s?: number;
    metadata?: Record<string, string>; workspace?: string } = {}): Promise<JsonObject> {
    const body = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
    return this.request("POST", "/v1/connect-tokens", body);
  }

  /** Templates: client.templates.create/get/list/delete/log/follow (templates.ts). */
  get templates(): Templates {
    return new Templates(this);
  }

  healthz(): Promise<JsonObject> {
    return this.request("GET", "/healthz");
  }
}

let defaultOne: Client | null = null;

/** The Client from $CUBICLE_URL and $CUBICLE_API_KEY, made on first use. */
export function defaultClient(): Client {
  defaultOne ??= new Client();
  return defaultOne;
}
