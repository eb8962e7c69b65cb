/** Shapes shared by the SDK's modules. */

/** Any JSON value, as the API answers it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** A JSON object answer (most actions). */
export type JsonObject = { [key: string]: any };

/** A point of a drag's path: [x, y] or {x, y}. */
export type Point = [number, number] | { x: number; y: number };
/** A screen region: [x, y, width, height]. */
export type Region = [number, number, number, number];

/**
 * An action's keyword options: the ones its table lists (typed), and
 * anything else, sent as it is (for actions newer than this SDK).
 */
export type ActionOptions<T extends object = {}> = T & { [name: string]: unknown };

/** One window, as `windows()` lists them. */
export interface Window {
  id: number;
  title?: string;
  app_class?: string;
  pid?: number;
  x?: number;
  y?: number;
  width?: number;
  height?: number;
  focused?: boolean;
  minimized?: boolean;
  maximized?: boolean;
}

/** What bash() and python() return. */
export class ProcessResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly exit_code: number | null;
  readonly signal: number | string | null;
  readonly duration_ms: number | null;
  readonly timed_out: boolean;
  /** The answer as the API sent it. */
  readonly raw: JsonObject;

  constructor(answer: JsonObject) {
    this.stdout = answer.stdout ?? "";
    this.stderr = answer.stderr ?? "";
    this.exit_code = answer.exit_code ?? null;
    this.signal = answer.signal ?? null;
    this.duration_ms = answer.duration_ms ?? null;
    this.timed_out = Boolean(answer.timed_out);
    this.raw = answer;
  }

  /** exit_code is 0. */
  get ok(): boolean {
    return this.exit_code === 0;
  }
}
