'use strict';
// A loopgate tool service in Node.js, with the npm `nats` package's
// services (micro) API: the same wire contract as a Go service written with
// loopgate's toolsvc package (see "Remote tools" in the README).
//
// Two endpoints, in one service ("cityops-node-tools"), both in queue
// group "q" (micro's default, the Go services' too):
//
//   <prefix>.get_procedure  CityOps get_procedure, from the example's own
//                           data file: the same answers as the Go tool, so
//                           either may serve the subject.
//   <prefix>.wire_echo      a diagnostic: answers with the loopgate headers
//                           it received; {"fail": "transient" | "bad_request"
//                           | "internal"} answers that error instead, and
//                           {"sleep_ms": n} takes that long (or until the
//                           call's deadline, when it answers nothing).
//
// Environment: NATS_URL (default nats://127.0.0.1:4222), SUBJECT_PREFIX
// (default cityops.tools). It prints one "ready" line on stdout once it
// serves, and stops cleanly on SIGINT or SIGTERM.

const fs = require('node:fs');
const path = require('node:path');
const { connect } = require('nats');

// The request headers loopgate sends (names are case-sensitive).
const H = {
  tool: 'Loopgate-Tool',
  operationId: 'Loopgate-Operation-Id',
  runId: 'Loopgate-Run-Id',
  callId: 'Loopgate-Call-Id',
  tenant: 'Loopgate-Tenant',
  principal: 'Loopgate-Principal',
  deadline: 'Loopgate-Deadline',
  timeoutMs: 'Loopgate-Timeout-Ms',
};

const DEFAULT_TIMEOUT_MS = 30000;

// A reply that ends no call: the handler gave up at the deadline.
class Expired extends Error {}

// ToolError is an error reply: code in Nats-Service-Error-Code, description
// in Nats-Service-Error. loopgate retries 429 and 503 once (transient: the
// call had no effect), records 504 as an unknown outcome (an upstream's
// deadline passed: the call may have taken effect); anything else is a
// tool failure.
class ToolError extends Error {
  constructor(code, description) {
    super(description);
    this.code = code;
  }
}

// callOf reads a request: identity headers, deadline and arguments.
function callOf(msg, receivedAt) {
  const h = msg.headers;
  const get = (k) => (h ? h.get(k) : '') || '';
  let deadline = receivedAt + DEFAULT_TIMEOUT_MS;
  const ms = Number.parseInt(get(H.timeoutMs), 10);
  const at = Date.parse(get(H.deadline));
  if (Number.isFinite(ms) && ms > 0) deadline = receivedAt + ms;
  if (Number.isFinite(at) && (!(ms > 0) || at < deadline)) deadline = at;
  let args;
  try {
    args = msg.json();
  } catch {
    throw new ToolError(400, 'bad request: the body is not JSON');
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw new ToolError(400, 'bad request: arguments must be a JSON object');
  }
  return {
    tool: get(H.tool),
    operationId: get(H.operationId),
    runId: get(H.runId),
    callId: get(H.callId),
    tenant: get(H.tenant),
    principal: get(H.principal),
    deadline,
    args,
  };
}

// endpoint wraps a tool function (call) => result into a service handler
// that speaks the contract: {"result": ...} or an error reply, and no
// reply at all once the call's deadline has passed (loopgate has stopped
// waiting; for a write, whether it happened is for loopgate to find out).
function endpoint(fn) {
  return async (err, msg) => {
    if (err) {
      console.error('endpoint error:', err);
      return;
    }
    const receivedAt = Date.now();
    try {
      const call = callOf(msg, receivedAt);
      const result = await fn(call);
      if (Date.now() >= call.deadline) return;
      msg.respond(JSON.stringify({ result: result === undefined ? null : result }));
    } catch (e) {
      if (e instanceof Expired) return;
      if (e instanceof ToolError) {
        msg.respondError(e.code, e.message);
        return;
      }
      console.error('tool failed:', e); // the details stay here
      msg.respondError(500, 'internal error');
    }
  };
}

// sleep waits ms, or until the call's deadline, when it throws Expired.
function sleep(ms, deadline) {
  const left = deadline - Date.now();
  return new Promise((resolve, reject) => {
    if (ms >= left) setTimeout(() => reject(new Expired()), Math.max(left, 0));
    else setTimeout(resolve, ms);
  });
}

// CityOps get_procedure, from examples/cityops/data/procedures.json.
const handbook = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', 'cityops', 'data', 'procedures.json'), 'utf8'),
).procedures;
const topics = Object.keys(handbook).sort();

function getProcedure(call) {
  const keys = Object.keys(call.args);
  const topic = call.args.topic;
  if (keys.some((k) => k !== 'topic') || typeof topic !== 'string' || [...topic].length < 1 || [...topic].length > 64) {
    throw new ToolError(400, 'bad request: want {"topic": "<1..64 characters>"}');
  }
  // ASCII case and space only, as the Go service: JavaScript's Unicode
  // rules differ from Go's ("İ", U+0085, U+FEFF).
  const key = topic.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, '').replace(/[A-Z]/g, (c) => c.toLowerCase());
  const p = handbook[key];
  if (!p) return { topic, found: false, topics };
  return { topic: key, procedure: [p.title, ...p.steps.map((s, i) => `${i + 1}. ${s}`)].join('\n') };
}

async function wireEcho(call) {
  const { fail, sleep_ms: sleepMs = 0, say = '' } = call.args;
  if (sleepMs > 0) await sleep(sleepMs, call.deadline);
  switch (fail) {
    case 'transient':
      throw new ToolError(503, 'unavailable: the echo backend is restarting');
    case 'bad_request':
      throw new ToolError(400, 'bad request: echo refuses this');
    case 'internal':
      throw new Error('echo broke (this text stays in the service log)');
  }
  return {
    said: say,
    served_by: 'node',
    seen: {
      tool: call.tool,
      operation_id: call.operationId,
      run_id: call.runId,
      call_id: call.callId,
      tenant: call.tenant,
      principal: call.principal,
      deadline: new Date(call.deadline).toISOString(),
    },
  };
}

// canonical is the schema as sorted-key JSON, for the endpoint metadata
// `loopgate tools` compares with the manifest's (it normalizes both).
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

const procedureSchema = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', 'cityops', 'schemas', 'get_procedure.schema.json'), 'utf8'),
);
const echoSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    say: { type: 'string' },
    fail: { enum: ['transient', 'bad_request', 'internal'] },
    sleep_ms: { type: 'integer', minimum: 0 },
  },
};

async function main() {
  const servers = process.env.NATS_URL || 'nats://127.0.0.1:4222';
  const prefix = process.env.SUBJECT_PREFIX || 'cityops.tools';
  const nc = await connect({ servers, name: 'cityops-node-tools' });
  const svc = await nc.services.add({
    name: 'cityops-node-tools',
    version: '1.0.0',
    description: 'CityOps get_procedure and a wire-contract echo, in Node.js',
    metadata: { 'loopgate.contract': '1' },
  });
  svc.addEndpoint('get_procedure', {
    subject: `${prefix}.get_procedure`,
    handler: endpoint(getProcedure),
    metadata: { 'loopgate.args_schema': canonical(procedureSchema) },
  });
  svc.addEndpoint('wire_echo', {
    subject: `${prefix}.wire_echo`,
    handler: endpoint(wireEcho),
    metadata: { 'loopgate.args_schema': canonical(echoSchema) },
  });
  await nc.flush();
  console.log(`node tool service ready: cityops-node-tools ${svc.info().id} on ${nc.getServer()} (${prefix}.get_procedure, ${prefix}.wire_echo)`);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await svc.stop();
    await nc.drain();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  const err = await nc.closed();
  if (err) {
    console.error('connection closed:', err);
    process.exitCode = 1;
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
