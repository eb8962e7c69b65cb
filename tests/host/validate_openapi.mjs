// node tests/host/validate_openapi.mjs FILE...: validates OpenAPI documents
// with @apidevtools/swagger-parser (its OpenAPI 3.1 schema and its own
// checks: $refs resolve, operationIds unique, path parameters declared),
// from webclient/node_modules (pinned in webclient/package-lock.json).
// Prints "FILE: valid OpenAPI <version>" or "FILE: invalid: <errors>" for
// each; exits 0 when every one is valid, else 1.

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const require = createRequire(path.join(root, "webclient", "package.json"));
const SwaggerParser = require("@apidevtools/swagger-parser");

let failed = 0;
for (const file of process.argv.slice(2)) {
	try {
		const api = await SwaggerParser.validate(file);
		console.log(`${file}: valid OpenAPI ${api.openapi}: ${Object.keys(api.paths).length} paths`);
	} catch (err) {
		console.log(`${file}: invalid: ${String(err.message || err).replace(/\s+/g, " ").slice(0, 4000)}`);
		failed++;
	}
}
process.exit(failed ? 1 : 0);
