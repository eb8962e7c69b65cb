/**
 * Every envd action (envd/README.md) as a method of Computer, made from one
 * table (_table.ts, generated from spec/actions.json like the Python SDK's
 * _table.py, so the two cannot drift): the name, its parameters, what it
 * returns, its doc. The typed signatures are _table.ts's `Actions`.
 *
 * Parameters are written as in the Python SDK:
 *   "x"       required, positional
 *   "x?"      optional (undefined = the server's default), positional
 *   "*keys"   the remaining positional arguments, sent as the list `keys`
 *   "-button" an option: a key of the last argument, an object
 * The options object also takes anything else, sent as it is.
 */
import { TABLE, type Result } from "./_table.js";
import { ProcessResult, type JsonObject } from "./types.js";
import { Timeout } from "./errors.js";

/** What a method needs of its computer. */
export interface ActionTarget {
  action(name: string, params?: JsonObject): Promise<JsonObject>;
  action_raw(name: string, params?: JsonObject): Promise<Uint8Array>;
}

interface Signature {
  positional: { name: string; optional: boolean }[];
  rest: string | null;
  options: Set<string>;
}

function signature(words: string): Signature {
  const sig: Signature = { positional: [], rest: null, options: new Set() };
  for (const w of words.split(" ").filter(Boolean)) {
    if (w.startsWith("*")) sig.rest = w.slice(1);
    else if (w.startsWith("-")) sig.options.add(w.slice(1));
    else sig.positional.push({ name: w.replace(/\?$/, ""), optional: w.endsWith("?") });
  }
  return sig;
}

function isOptions(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v);
}

/** The JSON body of a call of the action with these arguments. */
export function actionBody(name: string, words: string, args: unknown[]): JsonObject {
  const sig = signature(words);
  let opts: Record<string, unknown> = {};
  let list = args;
  // A trailing plain object is the options (no positional of any action is one).
  if (list.length > 0 && isOptions(list[list.length - 1])) {
    opts = list[list.length - 1] as Record<string, unknown>;
    list = list.slice(0, -1);
  }
  const body: JsonObject = {};
  const n = sig.positional.length;
  if (!sig.rest && list.length > n) {
    throw new TypeError(`${name}() takes at most ${n} positional arguments, got ${list.length}`);
  }
  sig.positional.forEach((p, i) => {
    const v = list[i];
    if (v === undefined) {
      if (!p.optional) throw new TypeError(`${name}(): missing argument ${p.name}`);
      return;
    }
    body[p.name] = v;
  });
  if (sig.rest && list.length > n) body[sig.rest] = list.slice(n);
  for (const [k, v] of Object.entries(opts)) {
    if (v === undefined) continue;
    if (k === "region" && sig.options.has("region")) {
      const [x, y, width, height] = v as number[];
      Object.assign(body, { x, y, width, height });
    } else {
      body[k] = v;
    }
  }
  return body;
}

async function processResult(c: ActionTarget, name: string, body: JsonObject): Promise<ProcessResult> {
  try {
    return new ProcessResult(await c.action(name, body));
  } catch (e) {
    if (e instanceof Timeout && e.result && typeof e.result === "object") {
      e.result = new ProcessResult(e.result as JsonObject);
    }
    throw e;
  }
}

const RESULTS: Record<Result, (c: ActionTarget, name: string, body: JsonObject) => Promise<unknown>> = {
  json: (c, name, body) => c.action(name, body),
  image: (c, name, body) => c.action_raw(name, body),
  windows: async (c, name, body) => (await c.action(name, body)).windows,
  text: async (c, name, body) => (await c.action(name, body)).text,
  process: processResult,
};

/** Adds every action of TABLE to cls's prototype as a method. */
export function install(cls: { prototype: object }): void {
  for (const [name, words, result, doc] of TABLE) {
    const call = RESULTS[result];
    const method = function (this: ActionTarget, ...args: unknown[]) {
      return call(this, name, actionBody(name, words, args));
    };
    Object.defineProperty(method, "name", { value: name });
    Object.defineProperty(method, "doc", { value: doc });
    Object.defineProperty(cls.prototype, name, { value: method, writable: true, configurable: true });
  }
}
