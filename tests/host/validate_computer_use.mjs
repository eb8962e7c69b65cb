// node tests/host/validate_computer_use.mjs FIXTURE...: checks recorded
// computer-use exchanges (tests/host/computer_use/*.json) against the
// route's schemas in docs/openapi.json (ComputerUseRequest, ComputerUseAnswer),
// so the shapes a client is generated from are the ones the tests replay.
// "$png WxH" and "$text" placeholders are valid strings already. JSON Schema
// 2020-12 by ajv (webclient/node_modules, pinned in its package-lock.json: a
// dependency of @apidevtools/swagger-parser and @modelcontextprotocol/sdk).
// Prints one line per fixture; exits 1 when any is invalid.

import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const require = createRequire(path.join(root, "webclient", "package.json"));
const Ajv2020 = require("ajv/dist/2020").default;

const doc = JSON.parse(fs.readFileSync(path.join(root, "docs", "openapi.json"), "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema({ $id: "cubicle", components: doc.components });
const request = ajv.compile({ $ref: "cubicle#/components/schemas/ComputerUseRequest" });
const answer = ajv.compile({ $ref: "cubicle#/components/schemas/ComputerUseAnswer" });

let failed = 0;
for (const file of process.argv.slice(2)) {
	const fx = JSON.parse(fs.readFileSync(file, "utf8"));
	const bad = [];
	if (!request(fx.request)) bad.push("request: " + ajv.errorsText(request.errors));
	if (!answer(fx.answer)) bad.push("answer: " + ajv.errorsText(answer.errors));
	console.log(`${path.basename(file)}: ${bad.length ? "invalid: " + bad.join("; ") : "valid"}`);
	failed += bad.length ? 1 : 0;
}
process.exit(failed ? 1 : 0);
