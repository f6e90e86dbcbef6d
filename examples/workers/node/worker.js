#!/usr/bin/env node
// A warren worker in Node.js: amqplib (RabbitMQ) + pg (PostgreSQL), from npm.
// It follows docs/worker-protocol.md: consume warren.ready.<queue> (prefetch =
// concurrency, manual ack), warren.claim -> handler with warren.heartbeat every
// lease/3 -> warren.complete, and only then ack. Its effect is a row keyed by
// the run key, inserted in the same transaction as warren.complete (exactly
// once: a stale attempt rolls it back).
//
//   npm install
//   node worker.js --queue node [--database-url URL] [--amqp-url URL]
//                  [--worker-id ID] [--table NAME] [--concurrency N] [--fail-first N]
//
// URLs default to $WARREN_DATABASE_URL / $WARREN_AMQP_URL.
'use strict';

const os = require('os');
const amqp = require('amqplib');
const { Pool } = require('pg');

function parseArgs(argv) {
  const a = {
    queue: null,
    databaseUrl: process.env.WARREN_DATABASE_URL,
    amqpUrl: process.env.WARREN_AMQP_URL,
    workerId: `${os.hostname()}:${process.pid}:node`,
    table: 'warren_example_effects',
    concurrency: 4,
    failFirst: 0,
    workMs: 100,
  };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    switch (k) {
      case '--queue': a.queue = v; i++; break;
      case '--database-url': a.databaseUrl = v; i++; break;
      case '--amqp-url': a.amqpUrl = v; i++; break;
      case '--worker-id': a.workerId = v; i++; break;
      case '--table': a.table = v; i++; break;
      case '--concurrency': a.concurrency = parseInt(v, 10); i++; break;
      case '--fail-first': a.failFirst = parseInt(v, 10); i++; break;
      case '--work-ms': a.workMs = parseInt(v, 10); i++; break;
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  if (!a.queue || !a.databaseUrl || !a.amqpUrl) {
    throw new Error('need --queue and the URLs (or WARREN_DATABASE_URL / WARREN_AMQP_URL)');
  }
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(a.table)) throw new Error('bad --table');
  return a;
}

const log = (m) => console.error(`${new Date().toISOString()} node-worker ${m}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Node's socket error codes (err.code, no SQLSTATE) for a server that cannot be reached now.
const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH',
  'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN',
]);

// True when a database call failed because PostgreSQL is unreachable, false for a real SQL
// error. Unreachable: a socket error (ECONNREFUSED, ECONNRESET, ...), one of pg's own
// connection errors (no code: "Connection terminated unexpectedly", pool timeouts) or a
// server error of SQLSTATE class 08 (connection exception) or 57P0x (shutting down).
function dbUnavailable(e) {
  const code = e && e.code;
  if (!code) return true;
  return NETWORK_CODES.has(code) || /^(08|57P0)/.test(code);
}

// Runs a database call until it succeeds or fails with a real SQL error (rethrown), retrying
// every pauseMs while PostgreSQL is unreachable: the caller's message stays unacked meanwhile.
async function db(fn, pauseMs = 1000) {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!dbUnavailable(e)) throw e;
      log(`database unavailable (${(e && (e.message || e.code)) || e}); retrying`);
      await sleep(pauseMs);
    }
  }
}

// The handler: the work itself. `stop.stopped` turns true when the lease is lost.
async function handle(run, stop, args) {
  if (run.attempt <= args.failFirst) {
    return { outcome: 'retry', error: `failing attempt ${run.attempt} on purpose` };
  }
  for (let t = 0; t < args.workMs; t += 50) {
    if (stop.stopped) return { outcome: 'retry', error: 'stopped' };
    await sleep(50);
  }
  return { outcome: 'succeeded', error: null };
}

async function main() {
  const args = parseArgs(process.argv);
  const pool = new Pool({ connectionString: args.databaseUrl, max: args.concurrency + 2 });
  // An idle pooled connection that breaks (PostgreSQL restarted) is an 'error' event on the
  // pool: without a listener Node would end the process. The pool drops that connection and
  // the next call that needs one goes through db().
  pool.on('error', (e) => log(`idle database connection lost: ${e.message}`));
  await pool.query(
    `CREATE TABLE IF NOT EXISTS ${args.table} (run_key text PRIMARY KEY, attempt int NOT NULL,
       worker text NOT NULL, payload jsonb, at timestamptz NOT NULL DEFAULT now())`);
  const conn = await amqp.connect(args.amqpUrl);
  const ch = await conn.createChannel();
  await ch.prefetch(args.concurrency);
  const queue = `warren.ready.${args.queue}`;
  let inflight = 0;
  let stopping = false;

  async function onMessage(msg) {
    let runKey;
    try {
      runKey = JSON.parse(msg.content.toString('utf8')).run_key;
      if (typeof runKey !== 'string') throw new Error('no run_key');
      if (msg.properties.messageId && msg.properties.messageId !== runKey) {
        throw new Error('message_id differs from run_key');
      }
    } catch (e) {
      log(`rejecting malformed message: ${e.message}`);
      ch.reject(msg, false); // the ready queue dead-letters it to warren.dead
      return;
    }
    const claim = await db(() => pool.query(
      'SELECT attempt, job, scheduled_at, payload, lease_seconds FROM warren.claim($1, $2)',
      [runKey, args.workerId]));
    if (claim.rowCount === 0) { // finished, leased elsewhere, held back: a duplicate
      ch.ack(msg);
      return;
    }
    const run = { runKey, ...claim.rows[0] };
    log(`claimed ${runKey} attempt ${run.attempt}`);
    const stop = { stopped: false };
    const leaseMs = run.lease_seconds * 1000;
    let lastOk = Date.now();
    const hb = setInterval(async () => {
      try {
        const r = await pool.query('SELECT warren.heartbeat($1, $2) AS held', [runKey, run.attempt]);
        if (r.rows[0].held) lastOk = Date.now();
        else { log(`${runKey}: heartbeat refused, stopping`); stop.stopped = true; }
      } catch (e) {
        log(`heartbeat failed: ${e.message}`);
      }
      if (Date.now() - lastOk > leaseMs - Math.min(5000, leaseMs / 3)) stop.stopped = true;
    }, leaseMs / 3);
    let result;
    try {
      result = await handle(run, stop, args);
    } catch (e) {
      result = { outcome: 'retry', error: `handler threw: ${e.message}` };
    }
    clearInterval(hb);
    if (stop.stopped) { // lease lost: not ours, no completion
      ch.ack(msg);
      return;
    }
    const recorded = await db(async () => {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        const r = await c.query('SELECT warren.complete($1, $2, $3, $4) AS ok',
          [runKey, run.attempt, result.outcome, result.error]);
        const ok = r.rows[0].ok;
        if (ok && result.outcome === 'succeeded') {
          await c.query(
            `INSERT INTO ${args.table} (run_key, attempt, worker, payload) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_key) DO NOTHING`,
            [runKey, run.attempt, args.workerId, run.payload]);
        }
        await c.query(ok ? 'COMMIT' : 'ROLLBACK');
        return ok;
      } catch (e) {
        await c.query('ROLLBACK').catch(() => {});
        throw e;
      } finally {
        c.release();
      }
    });
    log(`${runKey} attempt ${run.attempt}: ${result.outcome}${recorded ? '' : ' (stale)'}`);
    ch.ack(msg); // only after the completion committed
  }

  const { consumerTag } = await ch.consume(queue, (msg) => {
    if (msg === null) return; // consumer cancelled by the broker
    inflight++;
    onMessage(msg)
      .catch((e) => log(`error: ${e.stack}`)) // unacked: redelivered when we reconnect
      .finally(() => { inflight--; });
  }, { noAck: false });
  log(`worker ${args.workerId} consuming ${queue}`);

  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    await ch.cancel(consumerTag);
    while (inflight > 0) await sleep(50); // let running handlers finish
    await ch.close();
    await conn.close();
    await pool.end();
    log('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

// Loaded by tests/node_example.sh for these (the worker runs only as the main program).
module.exports = { db, dbUnavailable };

if (require.main === module) {
  main().catch((e) => {
    log(e.stack || String(e));
    process.exit(1);
  });
}
