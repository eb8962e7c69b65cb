// Templates (docs/api.md, Templates; docs/templates.md): a recipe of Debian
// packages, pip and npm packages, files and shell steps, built once by
// cubicled into an image computers start from. The Python SDK's
// sdk/python/cubicle/templates.py, the same names.
//
//     const t = await client.templates.create("etl", { apt: ["jq"], on_log: console.log });
//     await using c = await Computer.create({ template: "etl" });
import type { Client } from "./client.js";
import { TemplateFailed } from "./errors.js";
import type { JsonObject } from "./types.js";

const POLL_MS = 500;

/** What create() sends (the recipe) and how it waits. */
export interface TemplateCreateOptions {
  base?: "sandbox" | "desktop";
  apt?: string[];
  pip?: string[];
  npm?: string[];
  /** Shell steps, as root, in order. */
  run?: string[];
  /** Absolute path → text content. */
  files?: Record<string, string>;
  /** The admin key only: that workspace's template instead of a global one. */
  workspace?: string;
  /** Answer once it is built (default true); TemplateFailed if it failed. */
  wait?: boolean;
  timeout_s?: number;
  /** Gets the build's log as it grows (with wait). */
  on_log?: (text: string) => void;
}

/**
 * The templates the client's key sees (its workspace's and the global
 * ones): `client.templates`. Templates are plain objects: name, base, state
 * ("building", "ready", "error"), error, size_mb, build_s, recipe, ...
 */
export class Templates {
  constructor(readonly client: Client) {}

  static #path(name: string, sub = ""): string {
    return "/v1/templates/" + encodeURIComponent(name) + sub;
  }

  /**
   * Builds template `name`. With wait (the default) answers once it is
   * built, the template, and throws TemplateFailed when its build failed;
   * wait false answers at once (state building, or ready when the cache had
   * the same recipe).
   */
  async create(name: string, o: TemplateCreateOptions = {}): Promise<JsonObject> {
    const body = Object.fromEntries(Object.entries({
      name, base: o.base ?? "sandbox", apt: o.apt, pip: o.pip, npm: o.npm, run: o.run,
      files: o.files, workspace: o.workspace,
    }).filter(([, v]) => v !== undefined));
    const t = await this.client.request("POST", "/v1/templates", body);
    if (o.wait === false) return t;
    if (o.on_log) for await (const text of this.follow(name)) o.on_log(text);
    return this.get(name, { wait: true, timeout_s: o.timeout_s });
  }

  /** The template; with wait, once its build is over (TemplateFailed if it failed). */
  async get(name: string, o: { wait?: boolean; timeout_s?: number } = {}): Promise<JsonObject> {
    const query = o.wait ? { wait: "ready", timeout_s: Math.trunc(o.timeout_s ?? 1800) } : undefined;
    const t = await this.client.request("GET", Templates.#path(name), undefined, query);
    if (o.wait && t.state === "error")
      throw new TemplateFailed("template_failed",
        `template ${name} failed: ${t.error || "unknown error"}`);
    return t;
  }

  /** Every template the key sees (the admin: every one, or a workspace's and the global ones). */
  async list(o: { workspace?: string } = {}): Promise<JsonObject[]> {
    return (await this.client.request("GET", "/v1/templates", undefined,
      { workspace: o.workspace })).templates;
  }

  /** Deletes it (Conflict while a computer made from it is not deleted). */
  delete(name: string): Promise<JsonObject> {
    return this.client.request("DELETE", Templates.#path(name));
  }

  /** A piece of the build's log from byte `offset`: {"log", "next_offset", "state", ...}. */
  log(name: string, offset = 0): Promise<JsonObject> {
    return this.client.request("GET", Templates.#path(name, "/log"), undefined, { offset });
  }

  /** Yields the build's log as it grows, until the build is over. */
  async *follow(name: string): AsyncGenerator<string> {
    let offset = 0;
    for (;;) {
      const piece = await this.log(name, offset);
      offset = piece.next_offset as number;
      if (piece.log) yield piece.log as string;
      if (piece.state !== "building") {
        const rest = await this.log(name, offset);
        if (rest.log) yield rest.log as string;
        return;
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}
