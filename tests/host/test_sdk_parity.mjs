// The two SDKs keep one surface (sdk/README.md, "Adding to the SDKs"):
// every public class, function, method, field and parameter of the Python
// SDK (cubicle's __all__, read by sdk_surface.py) has its twin in the
// TypeScript SDK (sdk/js/src as TypeScript's own checker reads it: what a
// user's editor and tsc see), and the reverse, but for the differences
// listed below, each with its reason. A method added to one SDK alone
// fails here, naming it; so does an exception that no longer excuses
// anything. No cubicled, no computer: it reads the two SDKs' code.
//
// Names: TypeScript keeps Python's names (snake_case methods, fields and
// options: they are the API's names); a Python keyword parameter is a
// positional parameter or a key of the options object in TypeScript
// (`preview(port, ttl_s=None)` ↔ `preview(port, {ttl_s})`), either counts.
// Generated action methods (spec/actions.json) are compared by name only:
// both tables come from that one file and test_tables.py checks them.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { before, test } from "node:test";

import { repoRoot } from "./cubicled.mjs";

const sdkDir = path.join(repoRoot, "sdk", "js");

// Python name → TypeScript name, where the TypeScript SDK spells it its
// own way. "Class.name" for one class (its member, or its methods'
// parameter), "*.name" for every class.
const RENAMED = new Map([
	["default_client", "defaultClient"], // module functions are camelCase in JS (fromAnswer too)
	["*.request_id", "requestId"], // CubicleError's field (and constructor parameter), as JS's errors name theirs
	["Client.timeout", "timeout_ms"], // milliseconds (fetch's AbortSignal.timeout), seconds in Python
]);

// In TypeScript only: "Name", "Class.member" or "Class.method(param)".
const ONLY_IN_TS = new Map([
	["DEFAULT_URL", "Python's is cubicle.client.DEFAULT_URL, not exported from the package"],
	["VERSION", "Python's is cubicle.__version__"],
	["TABLE", "Python's is cubicle.actions.TABLE (the generated table), not exported from the package"],
	["actionBody", "the request body of an action call, exported for other JS tooling; Python's is private"],
	["fromAnswer", "Python's is cubicle.errors.from_answer, not exported from the package"],
	["CubicleError.body", "the error answer's whole JSON, kept for the caller; Python keeps code, message, param"],
	["CubicleError.constructor(body)", "the same"],
	["Client.href", "the absolute URL of a path and query, for fetch and for callers opening their own"],
	["Client.raw(data)", "raw() also sends bytes as they are (upload() is built on it); Python's upload() has its own"],
	["Client.raw(length)", "the same: a stream's Content-Length"],
	["Computer.read_file_stream", "the file as a web stream; Python's read_file(path, to=file) streams into a file"],
	["Computer.write_file(length)", "a ReadableStream's length (cubicled wants a Content-Length); Python measures a file by seeking"],
]);

// In Python only: the same keys.
const ONLY_IN_PYTHON = new Map([
	["Client.close", "Node's fetch pools connections process-wide: a Client holds none to close"],
	["Client.download(sink)", "TypeScript's download() answers the web stream for the caller to read"],
]);

function rename(cls, name) {
	return RENAMED.get(cls ? `${cls}.${name}` : name) ?? (cls && RENAMED.get(`*.${name}`)) ?? name;
}

function pythonSurface() {
	return JSON.parse(execFileSync("python3", [path.join(repoRoot, "tests", "host", "sdk_surface.py")], { encoding: "utf8" }));
}

// The TypeScript SDK's surface in sdk_surface.py's shape; each member also
// says whether the SDK declares it ("own") or it comes from the language
// (Error's message, Object's toString...).
function tsSurface() {
	const ts = createRequire(path.join(sdkDir, "package.json"))("typescript");
	const cfg = ts.parseJsonConfigFileContent(
		ts.readConfigFile(path.join(sdkDir, "tsconfig.json"), ts.sys.readFile).config,
		ts.sys,
		sdkDir,
	);
	const program = ts.createProgram(cfg.fileNames, { ...cfg.options, noEmit: true });
	const checker = program.getTypeChecker();
	const srcDir = path.join(sdkDir, "src") + path.sep;
	const ours = (d) => path.resolve(d.getSourceFile().fileName).startsWith(srcDir);
	// A parameter whose type is an object the SDK declares (an options
	// object) stands for its keys; any other for its own name.
	const paramNames = (sigs) => {
		const names = new Set();
		for (const sig of sigs) {
			for (const p of sig.getParameters()) {
				const t = checker.getNonNullableType(checker.getTypeOfSymbolAtLocation(p, p.valueDeclaration));
				const decls = t.flags & ts.TypeFlags.Object ? (t.symbol?.declarations ?? []) : [];
				const options =
					decls.length > 0 && decls.every((d) => ours(d) && !ts.isClassDeclaration(d))
						? checker.getPropertiesOfType(t)
						: [];
				if (options.length > 0) options.forEach((o) => names.add(o.name));
				else names.add(p.name);
			}
		}
		return [...names];
	};
	const member = (cls, p, isStatic) => {
		const d = p.valueDeclaration ?? p.declarations?.[0];
		// #private members and [Symbol.asyncDispose] (`await using`) are no names.
		if (!d || /^(#|__#|__@)/.test(p.name)) return null;
		if (ts.getCombinedModifierFlags(d) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) return null;
		const isMethod = ts.isMethodDeclaration(d) || ts.isMethodSignature(d);
		const t = checker.getTypeOfSymbolAtLocation(p, d);
		return {
			kind: isMethod ? "method" : "field",
			static: isStatic,
			params: isMethod ? paramNames(t.getCallSignatures()) : null,
			// Declared by a base class (an interface merged in, as Computer's
			// Actions, is the class's own).
			inherited: ts.isClassLike(d.parent) && d.parent !== cls.valueDeclaration,
			own: (p.declarations ?? []).some(ours),
		};
	};
	const index = program.getSourceFile(path.join(sdkDir, "src", "index.ts"));
	const surface = { exports: {}, classes: {}, functions: {} };
	for (const e of checker.getExportsOfModule(checker.getSymbolAtLocation(index))) {
		const s = e.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(e) : e;
		if (s.flags & ts.SymbolFlags.Class) {
			surface.exports[e.name] = "class";
			const members = {};
			const inst = checker.getDeclaredTypeOfSymbol(s);
			const stat = checker.getTypeOfSymbolAtLocation(s, s.valueDeclaration);
			for (const p of checker.getPropertiesOfType(inst)) {
				const m = member(s, p, false);
				if (m) members[p.name] = m;
			}
			for (const p of checker.getPropertiesOfType(stat)) {
				const m = p.name === "prototype" ? null : member(s, p, true);
				if (m) members[p.name] = m;
			}
			members.constructor = {
				kind: "method",
				static: true,
				params: paramNames(stat.getConstructSignatures()),
				inherited: !s.valueDeclaration.members.some(ts.isConstructorDeclaration),
				own: true,
			};
			surface.classes[e.name] = members;
		} else if (s.flags & ts.SymbolFlags.Function) {
			surface.exports[e.name] = "function";
			surface.functions[e.name] = paramNames(checker.getTypeOfSymbolAtLocation(s, s.valueDeclaration).getCallSignatures());
		} else if (s.flags & ts.SymbolFlags.Variable) {
			surface.exports[e.name] = "value";
		} // interfaces and types: TypeScript's alone
	}
	return surface;
}

// Names of JS's own protocol that Python spells as dunders (__str__...).
const LANGUAGE = new Set(["toString", "valueOf", "toJSON"]);

// Every difference, as lines ("Computer.cdp: in Python, not in TypeScript"),
// and the exceptions it used.
function compare(py, tsx) {
	const gaps = [];
	const used = new Set();
	const gap = (key, where) => {
		const excuses = where === "Python" ? ONLY_IN_PYTHON : ONLY_IN_TS;
		if (excuses.has(key)) used.add(`${where}:${key}`);
		else gaps.push(`${key}: in ${where}, not in ${where === "Python" ? "TypeScript" : "Python"}`);
	};
	const pyExports = new Map(Object.keys(py.exports).map((n) => [rename(null, n), n]));
	for (const [tsName, pyName] of pyExports) {
		if (!(tsName in tsx.exports)) gap(pyName, "Python");
		else if (tsx.exports[tsName] !== py.exports[pyName]) {
			gaps.push(`${pyName}: a ${py.exports[pyName]} in Python, a ${tsx.exports[tsName]} in TypeScript`);
		}
	}
	for (const tsName of Object.keys(tsx.exports)) if (!pyExports.has(tsName)) gap(tsName, "TypeScript");
	const params = (key, pyParams, tsParams, cls) => {
		const mapped = new Map(pyParams.map((p) => [rename(cls, p), p]));
		for (const [t, p] of mapped) if (!tsParams.includes(t)) gap(`${key}(${p})`, "Python");
		for (const t of tsParams) if (!mapped.has(t)) gap(`${key}(${t})`, "TypeScript");
	};
	for (const [tsName, pyName] of pyExports) {
		if (py.exports[pyName] === "function" && tsx.functions[tsName]) {
			params(pyName, py.functions[pyName], tsx.functions[tsName], null);
		}
		const pc = py.classes[pyName];
		const tc = tsx.classes[tsName];
		if (!pc || !tc) continue;
		const pyMembers = new Map(Object.keys(pc).map((n) => [rename(pyName, n), n]));
		// A member a base class defines is compared there, once.
		for (const [t, p] of pyMembers) {
			const key = `${pyName}.${p}`;
			const a = pc[p];
			const b = tc[t];
			if (!b) {
				if (!a.inherited) gap(key, "Python");
				continue;
			}
			if (a.inherited && b.inherited) continue;
			if (a.kind !== b.kind || a.static !== b.static) {
				const say = (m) => `${m.static ? "static " : ""}${m.kind}`;
				gaps.push(`${key}: a ${say(a)} in Python, a ${say(b)} in TypeScript`);
			} else if (a.kind === "method" && !py.generated.includes(p)) {
				params(key, a.params, b.params, pyName);
			}
		}
		for (const [t, m] of Object.entries(tc)) {
			if (m.own && !m.inherited && !LANGUAGE.has(t) && !pyMembers.has(t)) gap(`${pyName}.${t}`, "TypeScript");
		}
	}
	return { gaps, used };
}

let py, tsx;

before(() => {
	py = pythonSurface();
	tsx = tsSurface();
});

test("every public name and parameter of one SDK is in the other, but for the listed exceptions", () => {
	const { gaps, used } = compare(py, tsx);
	assert.deepEqual(
		gaps,
		[],
		"the SDKs drifted apart (sdk/README.md, \"Adding to the SDKs\"):\n  " + gaps.join("\n  "),
	);
	// An exception that excuses nothing any more goes.
	const stale = [
		...[...ONLY_IN_TS.keys()].filter((k) => !used.has(`TypeScript:${k}`)),
		...[...ONLY_IN_PYTHON.keys()].filter((k) => !used.has(`Python:${k}`)),
	];
	assert.deepEqual(stale, [], "exceptions that no longer differ: remove them from test_sdk_parity.mjs");
});

test("both surfaces were read whole (a reader that sees nothing would pass the test above)", () => {
	for (const s of [py, tsx]) {
		const c = s.classes.Computer;
		for (const m of ["create", "list", "read_file", "preview", "cdp", "start_recording", "computer_use", "left_click", "install_packages"]) {
			assert.equal(c[m]?.kind, "method", m);
		}
		assert.equal(c.create.static, true);
		assert.ok(c.preview.params.includes("ttl_s"), JSON.stringify(c.preview));
		assert.equal(c.id.kind, "field");
		assert.ok(Object.keys(s.classes).length >= 20, Object.keys(s.classes).join(" "));
	}
	assert.deepEqual(tsx.classes.Client.usage.params.sort(), ["from", "to", "workspace"]);
	assert.deepEqual(py.classes.Client.usage.params.sort(), ["from", "to", "workspace"]);
	assert.deepEqual(tsx.classes.Computer.constructor.params, ["data", "client"]);
	assert.ok(py.generated.length >= 40 && py.generated.includes("screenshot"), py.generated.join(" "));
});

// The README documents the whole TypeScript surface: every export by
// name, every method as `name(`, every field by name (its own or a base's
// listed once, where the base is).
function undocumented(readme, surface) {
	const has = (re) => re.test(readme);
	const word = (n) => new RegExp(`\\b${n.replace(/[$]/g, "\\$&")}\\b`);
	const missing = [];
	for (const name of Object.keys(surface.exports)) if (!has(word(name))) missing.push(name);
	for (const [cls, members] of Object.entries(surface.classes)) {
		for (const [name, m] of Object.entries(members)) {
			if (name === "constructor" || !m.own || m.inherited || LANGUAGE.has(name)) continue;
			if (!has(m.kind === "method" ? new RegExp(`\\b${name}\\(`) : word(name))) missing.push(`${cls}.${name}`);
		}
	}
	return missing;
}

test("sdk/js/README.md documents every public name of the TypeScript SDK", () => {
	const readme = readFileSync(path.join(sdkDir, "README.md"), "utf8");
	assert.deepEqual(undocumented(readme, tsx), [], "names sdk/js/README.md does not document");
	// The check can fail: a README that lost a method and an error class misses them.
	const cut = readme.replace(/download_recording\(/g, "").replace(/\bTimeout\b/g, "");
	assert.deepEqual(undocumented(cut, tsx), ["Timeout", "Computer.download_recording"]);
});

test("a method, a field, a parameter or a class added to one side alone is named", () => {
	const clone = (x) => JSON.parse(JSON.stringify(x));
	const p = clone(py);
	const t = clone(tsx);
	// The templates' surface (client.templates, Templates, TemplateFailed,
	// Computer.create(template)) lost from TypeScript.
	delete t.classes.Client.templates;
	delete t.exports.Templates;
	delete t.classes.Templates;
	delete t.exports.TemplateFailed;
	delete t.classes.TemplateFailed;
	t.classes.Computer.create.params = t.classes.Computer.create.params.filter((n) => n !== "template");
	t.classes.Computer.start_recording.params = []; // keep lost
	t.classes.Computer.frobnicate = { kind: "method", static: false, params: [], inherited: false, own: true };
	t.classes.Computer.get.static = false;
	delete t.classes.ComputerUseAnswer.failed;
	assert.deepEqual(compare(p, t).gaps.sort(), [
		"Client.templates: in Python, not in TypeScript",
		"Computer.create(template): in Python, not in TypeScript",
		"Computer.frobnicate: in TypeScript, not in Python",
		"Computer.get: a static method in Python, a method in TypeScript",
		"Computer.start_recording(keep): in Python, not in TypeScript",
		"ComputerUseAnswer.failed: in Python, not in TypeScript",
		"TemplateFailed: in Python, not in TypeScript",
		"Templates: in Python, not in TypeScript",
	]);
});
