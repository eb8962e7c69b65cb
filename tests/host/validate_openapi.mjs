// node tests/host/validate_openapi.mjs FILE: validates an OpenAPI document
// with @apidevtools/swagger-parser (its OpenAPI 3.1 schema and its own
// checks: $refs resolve, operationIds unique, path parameters declared),
// from webclient/node_modules (pinned in webclient/package-lock.json).
// Exits 0 and prints "valid OpenAPI <version>", or 1 with the errors.

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const require = createRequire(path.join(root, "webclient", "package.json"));
const SwaggerParser = require("@apidevtools/swagger-parser");

try {
	const api = await SwaggerParser.validate(process.argv[2]);
	console.log(`valid OpenAPI ${api.openapi}: ${Object.keys(api.paths).length} paths`);
} catch (err) {
	console.error(String(err.message || err).slice(0, 4000));
	process.exit(1);
}
