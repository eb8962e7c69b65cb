"""POST /v1/run for Python: the answer's shape, language fidelity, every
limit and each error.type, bad requests, /metrics and usage
(docs/code-runner.md). The attacks are tests/attack/test_runner.py."""

import json
import subprocess
import sys
import unittest

from runs import RunnerCase

# The standard library modules people use for data, text, math and dates:
# run here and by the host's python3, which must print the same.
FIDELITY = r'''
import json, csv, io, re, datetime, math, statistics, decimal, fractions, itertools
import collections, hashlib, base64, textwrap, string, heapq, bisect, functools
import zoneinfo, calendar, struct, dataclasses, enum, typing, uuid, difflib, html, urllib.parse
rows = list(csv.DictReader(io.StringIO("name,amount\nann,3.50\nbob,12.25\nann,1.25\n")))
totals = collections.Counter()
for r in rows:
    totals[r["name"]] += decimal.Decimal(r["amount"])
print(json.dumps({k: str(v) for k, v in sorted(totals.items())}, sort_keys=True))
out = io.StringIO(); w = csv.writer(out); w.writerows([["a", "b,c"], [1, 2]]); print(repr(out.getvalue()))
print(re.findall(r"\b(\w+)@(\w+)\.com\b", "x ann@ex.com, bob@corp.com y"))
print(re.sub(r"(?P<y>\d{4})-(?P<m>\d\d)", r"\g<m>/\g<y>", "2024-03 and 1999-12"))
d = datetime.datetime(2024, 2, 28, 23, 30, tzinfo=datetime.timezone.utc)
print((d + datetime.timedelta(hours=2)).isoformat(), d.strftime("%A %j"), d.weekday())
ny = d.astimezone(zoneinfo.ZoneInfo("America/New_York")); print(ny.isoformat(), ny.tzname())
print(datetime.date(2024, 3, 1) - datetime.date(2023, 3, 1), calendar.isleap(2100))
print(math.comb(50, 7), math.isqrt(10**20 + 1), round(math.gamma(5.5), 9), math.gcd(84, 36))
print(statistics.mean([1, 2, 3, 4.5]), statistics.median([5, 1, 3]), round(statistics.stdev([2, 4, 4, 4, 5, 5, 7, 9]), 9))
decimal.getcontext().prec = 30
print(decimal.Decimal(1) / decimal.Decimal(7), decimal.Decimal("1.10") + decimal.Decimal("2.205"))
print(fractions.Fraction(3, 4) + fractions.Fraction(5, 6), fractions.Fraction("0.125"))
print(list(itertools.accumulate([1, 2, 3, 4])), list(itertools.permutations("abc", 2))[:4])
print(list(itertools.groupby("aaabbc")) and [(k, len(list(g))) for k, g in itertools.groupby("aaabbc")])
print(collections.OrderedDict(a=1, b=2), collections.deque(range(5), maxlen=3), collections.defaultdict(list)[1])
P = collections.namedtuple("P", "x y"); print(P(1, 2)._asdict())
print(hashlib.sha256(b"abc").hexdigest(), base64.b64encode(b"\x00\xffhi").decode())
print(textwrap.fill("the quick brown fox jumps over the lazy dog", 12))
print(heapq.nsmallest(3, [5, 1, 4, 2, 3]), bisect.bisect([1, 3, 5], 4), functools.reduce(lambda a, b: a * b, range(1, 10)))
@dataclasses.dataclass(order=True)
class Loan:
    rate: float
    months: int
print(sorted([Loan(0.05, 12), Loan(0.03, 24)]))
p, r, n = 10000, 0.05 / 12, 12
pay = p * r / (1 - (1 + r) ** -n); print(round(pay, 2))
print(struct.pack("<IH", 1, 2).hex(), enum.Enum("C", "R G").R, urllib.parse.urlencode({"q": "a b&c"}))
print(list(difflib.unified_diff(["a\n", "b\n"], ["a\n", "c\n"]))[2:], html.escape("<a&b>"))
print(str(uuid.UUID(int=1)), 2**100, -7 // 2, 7 % -3, 0.1 + 0.2, f"{1234567.891:,.2f}", "ß".upper())
'''


class TestRunPython(RunnerCase, unittest.TestCase):
    ARGS = ("--run-wall-ms", "3000")

    def test_hello(self):
        r = self.py("print('hello', 6 * 7)")
        self.assertOk(r, "hello 42\n")
        self.assertEqual(r["stderr"], "")
        self.assertEqual(r["language"], "python")
        for k in ("cpu_ms", "wall_ms", "memory_kb"):
            self.assertIsInstance(r[k], int, k)
            self.assertGreaterEqual(r[k], 0, k)
        self.assertNotIn("truncated", r)

    def test_stdin_and_unicode(self):
        r = self.py("import sys\nfor line in sys.stdin: print(line.strip()[::-1], 'é→✓')",
                    stdin="abc\nxyz\n")
        self.assertOk(r, "cba é→✓\nzyx é→✓\n")

    def test_stdin_large(self):
        data = "0123456789abcdef" * 65536  # 1 MiB
        r = self.py("import sys, hashlib; print(hashlib.md5(sys.stdin.read().encode()).hexdigest())",
                    stdin=data)
        import hashlib
        self.assertOk(r, hashlib.md5(data.encode()).hexdigest() + "\n")

    def test_fidelity(self):
        r = self.py(FIDELITY)
        self.assertOk(r)
        want = subprocess.run([sys.executable, "-I", "-c", FIDELITY], capture_output=True,
                              text=True, env={"TZ": "UTC", "PATH": "/usr/bin:/bin"})
        self.assertEqual(want.returncode, 0, want.stderr)
        self.assertEqual(r["stdout"], want.stdout)

    def test_random_differs_between_runs(self):
        code = "import random, os; print(random.random(), os.urandom(8).hex())"
        a, b = self.py(code)["stdout"], self.py(code)["stdout"]
        self.assertNotEqual(a, b)

    def test_exception(self):
        r = self.py("def f(x):\n    return 1 / x\nprint('before')\nf(0)\n")
        self.assertError(r, "exception")
        self.assertEqual(r["error"]["message"], "ZeroDivisionError: division by zero")
        self.assertEqual(r["exit_code"], 1)
        self.assertEqual(r["stdout"], "before\n")
        self.assertIn('File "<code>", line 4, in <module>', r["stderr"])
        self.assertIn('File "<code>", line 2, in f', r["stderr"])
        self.assertIn("ZeroDivisionError", r["stderr"])

    def test_syntax_error(self):
        r = self.py("def (:")
        self.assertError(r, "exception")
        self.assertIn("SyntaxError", r["error"]["message"])

    def test_exit_codes(self):
        self.assertEqual(self.py("import sys; sys.exit(3)")["exit_code"], 3)
        self.assertNotIn("error", self.py("import sys; sys.exit(3)"))
        self.assertOk(self.py("exit()"))
        r = self.py("raise SystemExit('bye')")
        self.assertEqual((r["exit_code"], r["stderr"]), (1, "bye\n"))

    def test_cpu_limit(self):
        r = self.py("print('start', flush=True)\nwhile True: pass")
        self.assertError(r, "cpu_limit")
        self.assertEqual(r["stdout"], "start\n")
        self.assertGreaterEqual(r["cpu_ms"], 100)

    def test_cpu_limit_with_signals_blocked(self):
        r = self.py("import signal\n"
                    "for s in (signal.SIGPROF, signal.SIGXCPU, signal.SIGVTALRM, signal.SIGALRM):\n"
                    "    signal.signal(s, signal.SIG_IGN)\n"
                    "signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\n"
                    "while True: pass")
        self.assertError(r, "cpu_limit")

    def test_memory_limit(self):
        r = self.py("x = bytearray(200 << 20)")
        self.assertError(r, "memory_limit")
        r = self.py("x = []\nwhile True: x.append(bytes(10 << 20))")
        self.assertError(r, "memory_limit")
        # 100 MB is under the limit (untouched: calloc'd), and what is
        # touched is counted (8 MiB: page faults cost CPU time here)
        r = self.py("x = bytes(100 << 20); print(len(x))")
        self.assertOk(r, "104857600\n")
        r = self.py("x = bytearray(8 << 20); print(len(x))")
        self.assertOk(r, "8388608\n")
        self.assertGreater(r["memory_kb"], 7 * 1024)

    def test_timeout(self):
        r = self.py("import time; print('a', flush=True); time.sleep(60)")
        self.assertError(r, "timeout")
        self.assertEqual(r["stdout"], "a\n")
        self.assertGreaterEqual(r["wall_ms"], 3000)

    def test_output_limit(self):
        r = self.py("import sys\nsys.stdout.write('x' * (2 << 20))")
        self.assertError(r, "output_limit")
        self.assertIs(r["truncated"], True)
        self.assertEqual(len(r["stdout"]) + len(r["stderr"]), 1 << 20)
        self.assertEqual(set(r["stdout"]), {"x"})
        r = self.py("import sys\nwhile True: print('e' * 999, file=sys.stderr)")
        self.assertError(r, "output_limit")
        self.assertEqual(len(r["stderr"]), 1 << 20)
        # exactly the limit is fine
        r = self.py("import sys\nsys.stdout.write('x' * (1 << 20))")
        self.assertOk(r)
        self.assertEqual(len(r["stdout"]), 1 << 20)

    def test_binary_output(self):
        r = self.py("import os; os.write(1, b'a\\xff\\xfeb\\x00c')")
        self.assertOk(r, "a\ufffd\ufffdb\x00c")

    def test_output_not_utf8_past_ascii(self):
        # Bytes utf8_decode took for UTF-8 but JSON does not: a surrogate,
        # an overlong NUL, a code point past U+10FFFF (fuzz_codec found the
        # last): each was a 500 "out of memory" before; now U+FFFD per byte.
        r = self.py("import os; os.write(1, b'a\\xed\\xa0\\x80b\\xc0\\x80c\\xf4\\x90\\x80\\x80d')")
        self.assertOk(r, "a" + "\ufffd" * 3 + "b" + "\ufffd" * 2 + "c" + "\ufffd" * 4 + "d")

    def test_code_size(self):
        ok = "#" * (10240 - len("print(1)\n")) + "\nprint(1)"[:0]
        r = self.py("print(1)\n" + ok)
        self.assertOk(r, "1\n")
        r = self.cd.req("POST", "/v1/run", {"language": "python", "code": "#" * 10241},
                        key=self.key)
        self.assertEqual(r.status, 413, r.body)
        self.assertEqual(r.json["error"]["code"], "too_large")
        self.assertEqual(r.json["error"]["param"], "code")

    def test_bad_requests(self):
        cases = [
            ({"language": "ruby", "code": "1"}, "language"),
            ({"language": "py", "code": "1"}, "language"),
            ({"code": "1"}, "language"),
            ({"language": "python"}, "code"),
            ({"language": "python", "code": 1}, "code"),
            ({"language": "python", "code": "1", "stdin": 5}, "stdin"),
            ({"language": "python", "code": "1", "timeout": 5}, "timeout"),
        ]
        for body, param in cases:
            r = self.cd.req("POST", "/v1/run", body, key=self.key)
            self.assertEqual(r.status, 400, (body, r.body))
            self.assertEqual(r.json["error"]["param"], param, body)
        r = self.cd.req("POST", "/v1/run", "not json", key=self.key)
        self.assertEqual(r.status, 400)
        r = self.cd.req("GET", "/v1/run", key=self.key)
        self.assertEqual(r.status, 400)
        r = self.cd.req("POST", "/v1/run", {"language": "python", "code": "1"}, key="nope")
        self.assertEqual(r.status, 401)

    def test_mcp_run_code(self):
        hdr = {"Accept": "application/json, text/event-stream"}
        listed = self.cd.ok("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            key=self.key, headers=hdr)
        tool = [t for t in listed["result"]["tools"] if t["name"] == "run_code"][0]
        self.assertEqual(tool["inputSchema"]["required"], ["language", "code"])
        self.assertEqual(tool["inputSchema"]["properties"]["language"]["enum"],
                         ["python", "javascript"])
        call = lambda args: self.cd.ok("POST", "/mcp", {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_code", "arguments": args}}, key=self.key, headers=hdr)["result"]
        r = call({"language": "python", "code": "print(input() * 2)", "stdin": "ab\n"})
        self.assertFalse(r.get("isError"), r)
        self.assertEqual(r["structuredContent"]["stdout"], "abab\n")
        r = call({"language": "python", "code": "1/0"})
        self.assertEqual(r["structuredContent"]["error"]["type"], "exception")
        r = call({"language": "cobol", "code": "1"})
        self.assertTrue(r["isError"], r)

    def test_cli_and_sdk(self):
        import os
        from runs import HERE
        env = dict(os.environ, CUBICLE_URL="http://127.0.0.1:%d" % self.cd.port,
                   CUBICLE_API_KEY=self.key)
        cli = os.path.join(os.environ.get("CUBICLE_BUILD", os.path.join(HERE, "..", "..", "build")),
                           "bin", "cubicle")
        p = subprocess.run([cli, "run", "python", "-c", "import sys; print(sys.stdin.read()); "
                            "print('e', file=sys.stderr); sys.exit(3)", "--stdin", "in"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (3, "in\n", "e\n"))
        p = subprocess.run([cli, "run", "python", "-c", "while True: pass"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cpu_limit", p.stderr)
        p = subprocess.run([cli, "run", "js", "-"], input="console.log([1, 2].at(-1))", env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout), (0, "2\n"), p.stderr)
        sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
        import cubicle
        with cubicle.Client(url=env["CUBICLE_URL"], api_key=self.key) as c:
            self.assertEqual(c.run("python", "print(6 * 7)")["stdout"], "42\n")
            self.assertEqual(c.run("js", "console.log(stdin)", stdin="x")["stdout"], "x\n")
            self.assertEqual(c.run("python", "1/0")["error"]["type"], "exception")
            with self.assertRaises(cubicle.CubicleError) as ctx:
                c.run("python", "#" * 10241)
            self.assertEqual(ctx.exception.status, 413)

    def test_supervisor_restarted_by_a_run_lives_on(self):
        self.assert_restarted_supervisor_lives("python", "print(1)")

    def test_metrics_and_usage(self):
        before = self.cd.ok("GET", "/v1/usage", key=self.key2)["runs"]
        self.py("print(1)", key=self.key2)
        self.py("1/0", key=self.key2)
        after = self.cd.ok("GET", "/v1/usage", key=self.key2)["runs"]
        self.assertEqual(after["total"], before["total"] + 2)
        self.assertEqual(after["errors"], before["errors"] + 1)
        self.assertEqual(after["by_language"]["python"], before.get("by_language", {}).get("python", 0) + 2)
        self.assertEqual(self.cd.ok("GET", "/v1/usage", key=self.key2)["total"]["cost_nanodollars"], 0)
        m = self.cd.req("GET", "/metrics").body.decode()
        self.assertRegex(m, r'cubicle_runs_total\{language="python"\} [1-9]')
        self.assertRegex(m, r'cubicle_run_errors_total\{language="python",type="exception"\} [1-9]')
        self.assertRegex(m, r'cubicle_run_duration_seconds_count\{language="python"\} [1-9]')
        self.assertIn('cubicle_run_duration_seconds_bucket{language="python",le="+Inf"}', m)


if __name__ == "__main__":
    unittest.main()


ES2023 = r'''
const xs = [5, 1, 4, 2, 3];
console.log(xs.toSorted().join(), xs.join(), xs.toReversed().at(-1), xs.with(0, 9).join());
console.log(xs.findLast((x) => x % 2 === 0), xs.findLastIndex((x) => x > 10), [1, [2, [3]]].flat(Infinity).join());
console.log(Object.hasOwn({a: 1}, 'a'), 'a-b-c'.replaceAll('-', '+'), 'abc'.at(-1), typeof structuredClone);
class Loan {
  #rate;
  static count = 0;
  constructor(rate) { this.#rate = rate; Loan.count++; }
  get rate() { return this.#rate; }
  static { this.kind = 'loan'; }
  static has(o) { return #rate in o; }
}
const l = new Loan(0.05);
console.log(l.rate, Loan.count, Loan.kind, Loan.has(l), Loan.has({}));
const o = {a: {b: null}};
console.log(o?.a?.b ?? 'dflt', o.x?.y, (null ?? 0) || 'zero');
let n = null; n ??= 5; let m = 1; m ||= 2; m &&= 3;
console.log(n, m, 2n ** 70n, 1_000_000, 0b101, 0o17);
const [p, ...rest] = [1, 2, 3]; const {a, ...others} = {a: 1, b: 2, c: 3};
console.log(p, rest, a, others, [...'héllo'].length);
console.log(JSON.stringify({d: new Date(Date.UTC(2024, 1, 29, 12)).toISOString(), m: [...new Map([[1, 'a']])], s: [...new Set([1, 1, 2])]}));
console.log(/(?<y>\d{4})-(?<m>\d\d)/.exec('on 2024-03').groups.y, 'x'.padStart(3, '*'), [..."a1b2".matchAll(/\d/g)].map((m) => m[0]).join());
function* gen() { yield* [1, 2]; yield 3; }
console.log([...gen()], Array.from({length: 3}, (_, i) => i * i), Object.fromEntries([['k', 1]]));
console.log(Math.trunc(-4.7), Number.isInteger(5.0), (1234.5678).toFixed(2), parseInt('ff', 16), Math.hypot(3, 4));
const prom = Promise.resolve(1).then((v) => console.log('then', v));
(async () => { const v = await Promise.all([1, Promise.resolve(2)]); console.log('async', v); })();
console.log(typeof Symbol.iterator, typeof WeakRef, typeof globalThis);
console.log([3, 1, 2].sort((x, y) => x - y), 'end');
'''

ES2023_OUT = """1,2,3,4,5 5,1,4,2,3 5 9,1,4,2,3
2 -1 1,2,3
true a+b+c c undefined
0.05 1 loan true false
dflt undefined zero
5 3 1180591620717411303424n 1000000 5 15
1 [ 2, 3 ] 1 { b: 2, c: 3 } 5
{"d":"2024-02-29T12:00:00.000Z","m":[[1,"a"]],"s":[1,2]}
2024 **x 1,2
[ 1, 2, 3 ] [ 0, 1, 4 ] { k: 1 }
-4 true 1234.57 255 5
"""


class TestRunJavaScript(RunnerCase, unittest.TestCase):
    # JavaScript's CPU time is its worker thread's wall time while the code
    # runs (Node 20 has no per-thread CPU clock): on a loaded test machine
    # 100 ms of it can end a snippet that needs less CPU than that.
    ARGS = ("--run-cpu-ms", "400")

    def test_hello(self):
        r = self.js("console.log('hello', 6 * 7); console.error('to stderr')")
        self.assertOk(r, "hello 42\n")
        self.assertEqual(r["stderr"], "to stderr\n")
        self.assertEqual(r["language"], "javascript")
        for k in ("cpu_ms", "wall_ms", "memory_kb"):
            self.assertIsInstance(r[k], int, k)

    def test_supervisor_restarted_by_a_run_lives_on(self):
        self.assert_restarted_supervisor_lives("javascript", "console.log(1)")

    def test_stdin(self):
        r = self.js("console.log(stdin.split('\\n').filter(Boolean).map((l) => l.length).join())",
                    stdin="abc\nde\n")
        self.assertOk(r, "3,2\n")

    def test_es2023(self):
        r = self.js(ES2023)
        self.assertOk(r)
        self.assertTrue(r["stdout"].startswith(ES2023_OUT), r["stdout"])
        for line in ("then 1\n", "async [ 1, 2 ]\n", "[ 1, 2, 3 ] end\n"):
            self.assertIn(line, r["stdout"])

    def test_exception(self):
        r = self.js("function f() { null.x; }\nconsole.log('before');\nf();")
        self.assertError(r, "exception")
        self.assertEqual(r["exit_code"], 1)
        self.assertEqual(r["stdout"], "before\n")
        self.assertIn("TypeError", r["error"]["message"])
        self.assertIn("TypeError", r["stderr"])
        r = self.js("throw 42")
        self.assertError(r, "exception")
        r = self.js("let x = ;")
        self.assertError(r, "exception")
        self.assertIn("SyntaxError", r["error"]["message"])

    def test_cpu_limit(self):
        r = self.js("console.log('start'); for (;;) {}")
        self.assertError(r, "cpu_limit")
        self.assertEqual(r["stdout"], "start\n")
        # a builtin that never checks for interrupts: the backstop
        r = self.js("for (let i = 0; i < 1e9; i++) 'x'.repeat(1e7)")
        self.assertError(r, "cpu_limit")
        self.assertOk(self.js("console.log('alive')"), "alive\n")

    def test_memory_limit(self):
        r = self.js("let s = []; for (;;) s.push(new ArrayBuffer(16 << 20))")
        self.assertIn(r.get("error", {}).get("type"), {"memory_limit", "cpu_limit"}, r)
        r = self.js("const b = new ArrayBuffer(200 << 20)")
        self.assertIn(r.get("error", {}).get("type"), {"memory_limit", "exception"}, r)
        self.assertOk(self.js("console.log(new ArrayBuffer(8 << 20).byteLength)"), "8388608\n")

    def test_output_limit(self):
        r = self.js("for (;;) console.log('x'.repeat(4096))")
        self.assertError(r, "output_limit")
        self.assertIs(r["truncated"], True)
        self.assertEqual(len(r["stdout"]), 1 << 20)

    def test_output_not_utf8_past_ascii(self):
        # Bytes utf8_decode took for UTF-8 but JSON does not: a surrogate,
        # an overlong NUL, a code point past U+10FFFF (fuzz_codec found the
        # last): each was a 500 "out of memory" before; now U+FFFD per byte.
        r = self.py("import os; os.write(1, b'a\\xed\\xa0\\x80b\\xc0\\x80c\\xf4\\x90\\x80\\x80d')")
        self.assertOk(r, "a" + "\ufffd" * 3 + "b" + "\ufffd" * 2 + "c" + "\ufffd" * 4 + "d")

    def test_code_size(self):
        r = self.cd.req("POST", "/v1/run", {"language": "javascript", "code": "/" * 10241},
                        key=self.key)
        self.assertEqual(r.status, 413)
