// cubicle-jsrun's JavaScript half (docs/code-runner.md): QuickJS compiled to
// WebAssembly (npm quickjs-emscripten, pinned in package-lock.json), a new
// WebAssembly instance per run with a WebAssembly.Memory capped at the
// memory limit, in worker threads of one Node process that the C half
// (jsrun.c) started unprivileged in an empty network namespace.
//
// The main thread accepts runs on fd 3 (a listening unix socket; runproto.h
// framing), gives each to an idle worker and answers. A worker's QuickJS
// interrupt handler stops the code at its CPU time; a builtin that does not
// check for interrupts ('x'.repeat in a loop) is stopped by the main
// thread's backstop, which terminates the worker and starts another.
// The guest sees nothing of Node: its global object is QuickJS's own, plus
// console (into the run's output) and `stdin` (a string).
import net from 'node:net';
import fs from 'node:fs';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';

const REQ_MAGIC = 0x31514552, RESP_MAGIC = 0x31505352;
const E = { ok: 0, exception: 1, cpu_limit: 2, memory_limit: 3, timeout: 4, output_limit: 5, internal: 6 };
const REQ_LEN = 28, CODE_MAX = 10240, STDIN_MAX = 1 << 20;

if (isMainThread) main(); else worker();

function main() {
  const nworkers = Math.max(1, Number(process.argv[2]) || 2);
  const workers = [];
  const queue = [];
  // Workers that die before they are ever ready (QuickJS cannot load: a
  // missing package, no memory) are not respawned forever: after a few in a
  // row the supervisor exits, cubicled answers 503 and tries again later.
  let stillborn = 0;
  const spawn = () => {
    const w = new Worker(fileURLToPath(import.meta.url), {
      workerData: {}, resourceLimits: { maxOldGenerationSizeMb: 64 }, stdout: false, stderr: false,
    });
    const slot = { w, busy: null, ready: false };
    w.on('message', (m) => {
      if (m === 'ready') { slot.ready = slot.born = true; stillborn = 0; pump(); return; }
      if (m === 'started') { if (slot.busy) slot.busy.start(); return; }
      const job = slot.busy;
      slot.busy = null;
      if (job) { clearTimeout(job.timer); job.done(m); }
      pump();
    });
    w.on('error', (err) => process.stderr.write(`cubicle-jsrun: worker: ${err}\n`));
    w.on('exit', () => {
      const i = workers.indexOf(slot);
      if (i >= 0) workers.splice(i, 1);
      const job = slot.busy;
      slot.busy = null;
      if (job) { clearTimeout(job.timer); job.done(job.killed || { error: E.internal, msg: 'the JavaScript worker died' }); }
      if (!slot.born && ++stillborn >= 3) {
        process.stderr.write('cubicle-jsrun: JavaScript workers die before they are ready; exiting\n');
        process.exit(4);
      }
      workers.push(spawn());
      pump();
    });
    return slot;
  };
  for (let i = 0; i < nworkers; i++) workers.push(spawn());
  const pump = () => {
    while (queue.length) {
      const slot = workers.find((s) => s.ready && !s.busy);
      if (!slot) return;
      const job = queue.shift();
      slot.busy = job;
      // Backstop: a builtin that never checks for interrupts. The worker
      // is busy with this run only, so its wall time bounds its CPU time.
      const kill = (error, msg) => {
        job.killed = { error, exit_code: 1, msg, cpu_ms: job.req.cpu_ms, wall_ms: Date.now() - job.t0 };
        slot.ready = false;
        slot.w.terminate();
      };
      // The process's CPU time bounds the worker's from above (Node has no
      // per-thread clock): a worker that waited for a core (a loaded
      // machine) is not stopped for time it never ran; one that ran is
      // stopped at the CPU limit + 150 ms, and at the wall limit anyway.
      job.start = () => {
        clearTimeout(job.timer);
        job.t0 = Date.now();
        const cpu0 = process.cpuUsage();
        const check = () => {
          const u = process.cpuUsage(cpu0), cpu = (u.user + u.system) / 1000;
          const left = job.req.cpu_ms + 150 - cpu;
          if (left <= 0) kill(E.cpu_limit, 'the code used its CPU time');
          else if (Date.now() - job.t0 >= job.req.wall_ms) kill(E.timeout, 'the code ran past its wall-clock time');
          else job.timer = setTimeout(check, Math.max(10, Math.min(left, job.req.wall_ms - (Date.now() - job.t0))));
        };
        job.timer = setTimeout(check, job.req.cpu_ms + 150);
      };
      // until the code starts: making its instance may take no longer than the wall time
      job.timer = setTimeout(() => kill(E.timeout, 'the sandbox was not ready in time'), job.req.wall_ms);
      job.t0 = Date.now();
      slot.w.postMessage(job.req);
    }
  };
  // fd 3: one stream from cubicled; frames are a u32 id, then runproto.h's
  // request (or answer) and its bytes.
  const sock = new net.Socket({ fd: 3, readable: true, writable: true });
  let buf = Buffer.alloc(0);
  sock.on('data', (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    for (;;) {
      if (buf.length < 4 + REQ_LEN) return;
      const v = (i) => buf.readUInt32LE(4 + i * 4);
      const id = buf.readUInt32LE(0);
      const hdr = { magic: v(0), code_len: v(1), stdin_len: v(2), cpu_ms: v(3), wall_ms: v(4), mem_mb: v(5), out_max: v(6) };
      if (hdr.magic !== REQ_MAGIC || hdr.code_len > CODE_MAX || hdr.stdin_len > STDIN_MAX) process.exit(3);
      const need = 4 + REQ_LEN + hdr.code_len + hdr.stdin_len;
      if (buf.length < need) return;
      const at = 4 + REQ_LEN;
      const req = { ...hdr, code: buf.subarray(at, at + hdr.code_len).toString('utf8'),
        stdin: buf.subarray(at + hdr.code_len, need).toString('utf8') };
      buf = buf.subarray(need);
      queue.push({ req, done: (m) => answer(sock, id, m) });
      pump();
    }
  });
  sock.on('end', () => process.exit(0));
  sock.on('error', () => process.exit(0));
}

function answer(sock, id, m) {
  const out = Buffer.from(m.stdout || ''), err = Buffer.from(m.stderr || ''), msg = Buffer.from(m.msg || '').subarray(0, 4000);
  const h = Buffer.alloc(44);
  h.writeUInt32LE(id, 0);
  [RESP_MAGIC, m.exit_code | 0, m.error | 0, m.cpu_ms | 0, m.wall_ms | 0, m.memory_kb | 0, m.truncated ? 1 : 0,
    out.length, err.length, msg.length].forEach((v, i) => (i === 1 ? h.writeInt32LE(v, 8) : h.writeUInt32LE(v >>> 0, 4 + i * 4)));
  sock.write(Buffer.concat([h, out, err, msg]));
}

async function worker() {
  const { newQuickJSWASMModuleFromVariant, newVariant, RELEASE_SYNC } = await import('quickjs-emscripten');
  const variant = await RELEASE_SYNC;
  const loc = fileURLToPath(import.meta.resolve('@jitl/quickjs-wasmfile-release-sync/wasm'));
  const wasmModule = new WebAssembly.Module(fs.readFileSync(loc));
  // The next run's instance, made as soon as the last run answered (off the
  // request path): a new WebAssembly instance, runtime, context and prelude,
  // used by one run only. A run whose memory limit differs makes its own.
  // Runs are taken one at a time, in order: a run that arrives while the
  // next instance is being made waits for it.
  let next = null, chain = Promise.resolve();
  parentPort.on('message', (req) => {
    chain = chain.then(async () => {
      parentPort.postMessage(await run(req));
      next = await make(req.mem_mb);
    });
  });
  // Warm up: V8 compiles WebAssembly functions lazily, on first call.
  for (let i = 0; i < 3; i++)
    await run({ code: 'console.log([1, {a: 2}].map(String).join(), /a+/.test("aa"), JSON.stringify({b: [1n].length}))',
      stdin: '', cpu_ms: 10000, mem_mb: 128, out_max: 1 << 20, warmup: true });
  next = await make(128);
  parentPort.postMessage('ready');

  // A fresh instance: its own WebAssembly.Memory capped at mem_mb, QuickJS's
  // global object plus console (writing into whichever run `st.out` is).
  async function make(mem_mb) {
    const maxPages = Math.max(1, Math.floor((mem_mb * 1024 * 1024) / 65536));
    const inst = { mem_mb, st: { deadline: Infinity, cpu0: null, cpu_ms: 0, wall_end: Infinity, out: null } };
    try {
      inst.memory = new WebAssembly.Memory({ initial: 256, maximum: Math.max(256, maxPages) });
      // A new instance of the compiled module, on its own memory.
      const m = await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmModule, wasmMemory: inst.memory }));
      const rt = inst.rt = m.newRuntime();
      rt.setMemoryLimit(mem_mb * 1024 * 1024);
      rt.setMaxStackSize(1024 * 1024);
      // Past the CPU limit in wall time, the process's CPU time decides
      // (it bounds this thread's from above); past the wall limit, stop.
      rt.setInterruptHandler(() => {
        const st = inst.st, now = performance.now();
        if (now <= st.deadline) return false;
        if (now > st.wall_end) return (st.timed_out = true);
        const u = process.cpuUsage(st.cpu0);
        return (u.user + u.system) / 1000 > st.cpu_ms;
      });
      const ctx = inst.ctx = rt.newContext();
      const w = ctx.newFunction('__write', (fd, s) => {
        const o = inst.st.out;
        if (!o) return;
        o.write(ctx.getNumber(fd), ctx.getString(s));
        if (o.cut) return ctx.newError('output limit');
      });
      ctx.setProp(ctx.global, '__write', w);
      w.dispose();
      const pre = ctx.evalCode(PRELUDE, 'prelude.js');
      if (pre.error) { const pe = ctx.dump(pre.error); pre.error.dispose(); throw new Error('prelude failed: ' + JSON.stringify(pe)); }
      pre.value.dispose();
    } catch (e) {
      dispose(inst);
      inst.failed = e;
    }
    return inst;
  }

  function dispose(inst) {
    try { inst.ctx && inst.ctx.dispose(); inst.rt && inst.rt.dispose(); } catch { /* a dead instance */ }
    inst.ctx = inst.rt = null;
  }

  async function run(req) {
    const res = { stdout: '', stderr: '', exit_code: 0, error: 0, msg: '', truncated: false };
    const out = {
      used: 0, cut: false,
      write(fd, s) {
        if (this.cut) return;
        const room = req.out_max - this.used;
        if (Buffer.byteLength(s) > room) {
          s = Buffer.from(s).subarray(0, room).toString('utf8');
          this.cut = true;
        }
        this.used += Buffer.byteLength(s);
        if (fd === 1) res.stdout += s; else res.stderr += s;
      },
    };
    let inst = next;
    next = null;
    if (!inst || inst.mem_mb !== req.mem_mb || inst.failed) {
      if (inst) dispose(inst);
      inst = await make(req.mem_mb);
    }
    if (inst.failed)
      return { ...res, error: E.internal, msg: `cannot make a QuickJS instance: ${inst.failed}` };
    const { ctx, rt, memory, st } = inst;
    let tc = performance.now();
    try {
      st.out = out;
      const sin = ctx.newString(req.stdin);
      ctx.setProp(ctx.global, 'stdin', sin);
      sin.dispose();
      if (!req.warmup) parentPort.postMessage('started');
      tc = performance.now();
      st.deadline = tc + req.cpu_ms;
      st.wall_end = tc + req.wall_ms;
      st.cpu_ms = req.cpu_ms;
      st.timed_out = false;
      st.cpu0 = process.cpuUsage();
      const r = ctx.evalCode(req.code, 'code.js');
      if (r.error) {
        const e = ctx.dump(r.error);
        r.error.dispose();
        const name = e && e.name, message = e && e.message;
        if (out.cut) { res.error = E.output_limit; res.msg = 'the code printed more than the output limit; the output is cut'; }
        else if (name === 'InternalError' && message === 'interrupted' && st.timed_out) { res.error = E.timeout; res.msg = 'the code ran past its wall-clock time'; }
        else if (name === 'InternalError' && message === 'interrupted') { res.error = E.cpu_limit; res.msg = 'the code used its CPU time'; }
        else if ((name === 'InternalError' || name === 'RangeError') && /out of memory|Out of memory|allocation/.test(message || '')) { res.error = E.memory_limit; res.msg = `${name}: ${message}`; }
        else {
          res.error = E.exception;
          res.msg = e && typeof e === 'object' && name ? `${name}: ${message}` : `Uncaught ${String(e)}`;
          out.write(2, `${res.msg}\n${(e && e.stack) || ''}`);
        }
        res.exit_code = 1;
      } else {
        r.value.dispose();
        rt.executePendingJobs(-1);
      }
    } catch (e) {
      // the instance itself failed: its memory is at the cap, or QuickJS aborted
      res.error = E.memory_limit;
      res.msg = `the code ran out of memory (${e && e.message ? e.message : e})`;
      res.exit_code = 1;
    } finally {
      st.out = null;
      st.deadline = st.wall_end = Infinity;
    }
    const ms = Math.round(performance.now() - tc);
    const u = st.cpu0 ? process.cpuUsage(st.cpu0) : null;
    const cpu = u ? Math.min(ms, Math.round((u.user + u.system) / 1000)) : ms;
    const kb = Math.round(memory.buffer.byteLength / 1024);
    // The instance is done with: nothing of this run reaches another.
    dispose(inst);
    if (out.cut) { res.error = E.output_limit; res.truncated = true; res.msg = 'the code printed more than the output limit; the output is cut'; res.exit_code = 1; }
    return { ...res, cpu_ms: cpu, wall_ms: ms, memory_kb: kb };
  }
}

const PRELUDE = `
(() => {
  const w = globalThis.__write;
  delete globalThis.__write;
  const seen = new Set();
  const fmt = (v, depth) => {
    if (typeof v === 'string') return depth ? JSON.stringify(v) : v;
    if (typeof v === 'function') return '[Function ' + (v.name || 'anonymous') + ']';
    if (typeof v === 'bigint') return v + 'n';
    if (typeof v === 'symbol') return v.toString();
    if (v === null || typeof v !== 'object') return String(v);
    if (v instanceof Error) return v.stack ? v.name + ': ' + v.message + '\\n' + v.stack : String(v);
    if (seen.has(v)) return '[Circular]';
    if (depth > 4) return Array.isArray(v) ? '[Array]' : '[Object]';
    seen.add(v);
    try {
      if (Array.isArray(v)) return '[ ' + v.map((x) => fmt(x, depth + 1)).join(', ') + ' ]';
      if (v instanceof Map) return 'Map(' + v.size + ') { ' + [...v].map(([k, x]) => fmt(k, depth + 1) + ' => ' + fmt(x, depth + 1)).join(', ') + ' }';
      if (v instanceof Set) return 'Set(' + v.size + ') { ' + [...v].map((x) => fmt(x, depth + 1)).join(', ') + ' }';
      if (v instanceof Date) return v.toISOString();
      if (v instanceof RegExp) return String(v);
      const keys = Object.keys(v);
      if (!keys.length) return '{}';
      return '{ ' + keys.map((k) => (/^[A-Za-z_$][\\w$]*$/.test(k) ? k : JSON.stringify(k)) + ': ' + fmt(v[k], depth + 1)).join(', ') + ' }';
    } finally { seen.delete(v); }
  };
  const line = (fd) => (...a) => { const e = w(fd, a.map((x) => fmt(x, 0)).join(' ') + '\\n'); if (e) throw e; };
  globalThis.console = { log: line(1), info: line(1), debug: line(1), warn: line(2), error: line(2) };
})();
`;
