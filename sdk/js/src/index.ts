/**
 * cubicle: Linux computers (Xfce desktops and headless sandboxes) for AI
 * agents, driven through cubicled's REST API. The same surface and names
 * as the Python SDK (sdk/python); no dependencies (fetch and web streams).
 *
 *     import { Computer } from "cubicle";
 *     await using c = await Computer.create({ kind: "desktop" });
 *     await c.left_click(100, 200);
 *     await c.type("hello\n");
 *     const png = await c.screenshot();
 *
 * Configuration: $CUBICLE_URL and $CUBICLE_API_KEY, or new Client({url,
 * api_key}) passed as client to Computer.create/get/list.
 */
export { Client, defaultClient, DEFAULT_URL } from "./client.js";
export type { ClientOptions, Query, RawOptions, Upload } from "./client.js";
export { Computer, ComputerUseAnswer } from "./computer.js";
export type {
  Cdp, ComputerUseOptions, ComputerUseTool, CreateOptions, Kind, Preview, PreviewOptions, Recording,
  RecordingAction, RecordingTrack, State, StreamToken,
} from "./computer.js";
export { TABLE } from "./_table.js";
export type { Actions, Result } from "./_table.js";
export { actionBody } from "./actions.js";
export { Templates } from "./templates.js";
export type { TemplateCreateOptions } from "./templates.js";
export { ProcessResult } from "./types.js";
export type { ActionOptions, Json, JsonObject, Point, Region, Window } from "./types.js";
export {
  BadGateway, BadRequest, ComputerFailed, Conflict, ConnectionFailed, CubicleError, Forbidden,
  fromAnswer, InsufficientStorage, InternalError, InvalidParameter, NotFound, RateLimited,
  RequestTimeout, TemplateFailed, Timeout, TooLarge, Unauthorized, Unavailable,
} from "./errors.js";

export const VERSION = "0.1.0";
