// A user service for ecron in Node.js (18 or later), with the standard library only:
// what the Python kit (sdk/python) does, by hand, for one language more.
//
//   ECRON_SECRET=... node examples/node/service.js --port 8090
//
// POST /jobs/{name} starts a run for X-Ecron-Execution-Id (a repeat starts nothing),
// GET /jobs/{name}/{eid} polls it, DELETE /jobs/{name}/{eid} cancels it, GET
// /jobs/{name}?ids=a,b polls many; an unknown id is 404 {"status": "UNKNOWN"}. With
// ECRON_SECRET every call must carry a valid X-Ecron-Signature v2 (else 401); past
// MAX_RUNNING (4) running jobs a new trigger is 429 with Retry-After; on SIGTERM running
// jobs end FAILED with "interrupted": true, pushed where ecron gave a callback URL.
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');
const { setTimeout: sleep } = require('node:timers/promises');

const SECRET = process.env.ECRON_SECRET || '';
const MAX_RUNNING = Number(process.env.MAX_RUNNING || 4);
const KEEP_ENDED_MS = 3600 * 1000; // an ended run's report is kept this long
const REMOTE_ID = /^[A-Za-z0-9_.-]{1,64}$/;

// The jobs: an async function of the run; what it returns is the SUCCESS report's result,
// what it throws ends the run FAILED with its message. run.signal aborts on a cancel.
const JOBS = {
  async countdown(run) {
    const steps = run.body.steps ?? 10;
    for (let step = 1; step <= steps; step++) {
      await sleep((run.body.pause ?? 1) * 1000, undefined, { signal: run.signal });
      run.progress((100 * step) / (steps + 1), `step ${step} of ${steps}`);
    }
    return { steps };
  },
};

const runs = new Map(); // "name/eid" -> run

function newRun(name, eid, headers, body) {
  const aborter = new AbortController();
  const run = {
    name, eid, body, signal: aborter.signal, aborter,
    task: headers['x-ecron-task'], resumeOf: headers['x-ecron-resume-of'],
    callback: headers['x-ecron-callback-url'], token: headers['x-ecron-callback-token'],
    report: { status: 'RUNNING', progress: 0 },
    endedAt: null,
    progress(percent, message) {
      if (run.report.status === 'RUNNING') {
        run.report = { ...run.report, progress: Math.min(100, Math.max(0, percent)), message };
      }
    },
  };
  return run;
}

function end(run, report) {
  if (run.report.status !== 'RUNNING') return false; // the first end is the one kept
  run.report = { ...run.report, ...report };
  run.endedAt = Date.now();
  run.aborter.abort();
  return true;
}

function start(run) {
  JOBS[run.name](run).then(
    (result) => end(run, { status: 'SUCCESS', progress: 100, ...(result === undefined ? {} : { result }) }),
    (error) => end(run, { status: 'FAILED', message: String(error && error.message ? error.message : error) }),
  );
}

function running() {
  let count = 0;
  for (const run of runs.values()) if (run.report.status === 'RUNNING') count++;
  return count;
}

function forgetOld(now) {
  for (const [key, run] of runs) if (run.endedAt !== null && now - run.endedAt > KEEP_ENDED_MS) runs.delete(key);
}

function signed(req, body) {
  const fields = {};
  for (const part of String(req.headers['x-ecron-signature'] || '').split(',')) {
    const at = part.indexOf('=');
    if (at > 0) fields[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  const t = fields.t || '';
  const v2 = fields.v2 || '';
  if (!/^[0-9]{1,15}$/.test(t) || !/^[0-9a-f]{64}$/.test(v2)) return false;
  if (Math.abs(Date.now() / 1000 - Number(t)) > 300) return false; // 5 minutes at most
  const eid = req.headers['x-ecron-execution-id'] || '';
  // req.url is the target as sent: the path, still percent-encoded, and ?query
  const signedText = Buffer.concat([Buffer.from(`${t}.${req.method}.${req.url}.${eid}.`), body]);
  const expected = crypto.createHmac('sha256', SECRET).update(signedText).digest();
  return crypto.timingSafeEqual(expected, Buffer.from(v2, 'hex'));
}

function answer(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

const UNKNOWN = { status: 'UNKNOWN' };

function trigger(req, res, name, body) {
  const eid = String(req.headers['x-ecron-execution-id'] || '');
  if (!REMOTE_ID.test(eid)) return answer(res, 400, { error: `X-Ecron-Execution-Id must be 1 to 64 of [A-Za-z0-9_.-], not '${eid}'` });
  if (!(name in JOBS)) return answer(res, 404, { error: `no job named '${name}' here; this service runs ${Object.keys(JOBS)}` });
  const known = runs.get(`${name}/${eid}`);
  if (known) return answer(res, 200, known.report); // the same eid is the same run
  if (stopping) return answer(res, 503, { error: 'the service is stopping' }, { 'Retry-After': '1' });
  if (running() >= MAX_RUNNING) {
    return answer(res, 429, { error: `busy: max_running is ${MAX_RUNNING}` }, { 'Retry-After': '1' });
  }
  let parsed;
  try {
    parsed = body.length ? JSON.parse(body.toString('utf8')) : {};
  } catch (error) {
    return answer(res, 400, { error: `the trigger's body is not JSON: ${error.message}` });
  }
  const run = newRun(name, eid, req.headers, parsed);
  runs.set(`${name}/${eid}`, run);
  start(run);
  return answer(res, 200, run.report);
}

function handle(req, res, body) {
  forgetOld(Date.now());
  if (SECRET && !signed(req, body)) {
    return answer(res, 401, { error: 'X-Ecron-Signature is missing, wrong or more than 5 minutes old' });
  }
  const url = new URL(req.url, 'http://service');
  const parts = url.pathname.split('/').map(decodeURIComponent);
  if (parts.length < 3 || parts.length > 4 || parts[0] !== '' || parts[1] !== 'jobs' || !parts[2]) {
    return answer(res, 404, { error: `no such path: '${url.pathname}'` });
  }
  const [, , name, eid] = parts;
  if (eid === undefined && req.method === 'POST') return trigger(req, res, name, body);
  if (eid === undefined && req.method === 'GET') {
    const ids = url.searchParams.get('ids');
    if (!ids) return answer(res, 400, { error: 'ids is missing: ask GET /jobs/{name}?ids=<eid>,<eid>' });
    const reports = {};
    for (const id of ids.split(',')) if (runs.has(`${name}/${id}`)) reports[id] = runs.get(`${name}/${id}`).report;
    return answer(res, 200, { reports });
  }
  const run = eid === undefined ? undefined : runs.get(`${name}/${eid}`);
  if (eid !== undefined && (req.method === 'GET' || req.method === 'DELETE')) {
    if (!run) return answer(res, 404, UNKNOWN);
    if (req.method === 'DELETE') end(run, { status: 'FAILED', message: 'cancelled' });
    return answer(res, 200, run.report);
  }
  return answer(res, 405, { error: `${req.method} is not answered here` });
}

let stopping = false;

async function stop() {
  // SIGTERM: every running job ends FAILED interrupted (ecron may resume it), pushed to
  // ecron where it gave a callback URL; then the process ends.
  stopping = true;
  const pushes = [];
  for (const run of runs.values()) {
    if (!end(run, { status: 'FAILED', message: 'interrupted: the service is stopping', interrupted: true })) continue;
    if (!run.callback || !run.token) continue;
    pushes.push(fetch(run.callback, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${run.token}` },
      body: JSON.stringify(run.report),
      signal: AbortSignal.timeout(5000),
    }).catch((error) => console.error(`the report about ${run.eid} was not delivered: ${error}`)));
  }
  await Promise.all(pushes);
  server.close();
  process.exit(0);
}

const port = Number(process.argv[process.argv.indexOf('--port') + 1] || 8090);
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => handle(req, res, Buffer.concat(chunks)));
});
server.listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}`));
process.on('SIGTERM', stop);
