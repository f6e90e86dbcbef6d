#!/usr/bin/env node
// A warren worker in Node.js: amqplib (RabbitMQ) + pg (PostgreSQL), from npm.
// It follows docs/worker-protocol.md with the batch forms of the protocol: consume
// warren.ready.<queue> (prefetch = concurrency, manual acks), hold each delivery until its
// run is due (on an estimate of the database's clock), claim every due delivery in one
// warren.claim_many, run the handlers, heartbeat the running runs in one statement every
// lease/3, complete the finished ones in one transaction (warren.complete_many for the
// successes, warren.complete for the others, the effect rows for the recorded successes),
// and only then acknowledge them (one basic.ack with `multiple` where it can).
//
//   npm install
//   node worker.js --queue node [--database-url URL] [--amqp-url URL] [--worker-id ID]
//                  [--table NAME] [--concurrency N] [--prefetch N] [--fail-first N]
//                  [--work-ms MS]
//
// URLs default to $WARREN_DATABASE_URL / $WARREN_AMQP_URL.
'use strict';

const os = require('os');
const { performance } = require('perf_hooks');
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
    prefetch: 0, // 0: = concurrency
    failFirst: 0,
    workMs: 100,
  };
  const int = (k, v, min) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`${k} wants an integer >= ${min}, not ${v}`);
    return n;
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
      case '--concurrency': a.concurrency = int(k, v, 1); i++; break;
      case '--prefetch': a.prefetch = int(k, v, 1); i++; break;
      case '--fail-first': a.failFirst = int(k, v, 0); i++; break;
      case '--work-ms': a.workMs = int(k, v, 0); i++; break;
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  if (!a.queue || !a.databaseUrl || !a.amqpUrl) {
    throw new Error('need --queue and the URLs (or WARREN_DATABASE_URL / WARREN_AMQP_URL)');
  }
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(a.table)) {
    throw new Error(`--table ${a.table}: want a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)`);
  }
  if (a.concurrency > 4096) throw new Error('--concurrency: at most 4096');
  if (a.prefetch > 65535) throw new Error('--prefetch: at most 65535');
  if (a.prefetch === 0) a.prefetch = a.concurrency;
  return a;
}

const log = (m) => console.error(`${new Date().toISOString()} node-worker ${m}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mono = () => performance.now(); // monotonic milliseconds

// Node's socket error codes (err.code, no SQLSTATE) for a server that cannot be reached now.
const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH',
  'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN',
]);

// True when a database call failed because PostgreSQL is unreachable, false for a real SQL
// error. Unreachable: a socket error (ECONNREFUSED, ECONNRESET, ...), one of pg's own
// connection errors (no code: "Connection terminated unexpectedly", pool and query timeouts)
// or a server error of SQLSTATE class 08 (connection exception) or 57P0x (shutting down).
function dbUnavailable(e) {
  const code = e && e.code;
  if (!code) return true;
  return NETWORK_CODES.has(code) || /^(08|57P0)/.test(code);
}

// Runs a database call until it succeeds or fails with a real SQL error (rethrown), retrying
// every pauseMs while PostgreSQL is unreachable: the caller's messages stay unacked meanwhile.
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
    await sleep(Math.min(50, args.workMs - t));
  }
  return { outcome: 'succeeded', error: null };
}

// A delivery is held until its run is due, at most this far ahead of the database's clock
// (planner.release_lead, 3 s by default, plus slack): one "due" later than that (a forged or
// corrupt due_at) is claimed at once and the database decides, so it cannot take a prefetch
// slot for ever.
const HOLD_MAX_MS = 10000;
// A held delivery is claimed this long before its due time on the estimate: warren.claim_many
// waits for the due time on the database's clock (at most 1 s), so it never starts early.
const CLAIM_AHEAD_MS = 2;
// The estimate of the database's clock is read again this often, and a reading whose round
// trip took longer than CLOCK_RTT_MAX_MS is not used (its midpoint could be off by half).
const CLOCK_EVERY_MS = 10000;
const CLOCK_RTT_MAX_MS = 20;
// A delivery the claim gave no row for and the database says is due later is held again at
// most this often before it is acknowledged as a duplicate.
const MAX_REHOLDS = 3;
// Claim and completion batches in flight at once, each of at most half the slots: while one
// batch's completion commits (and its acknowledgements let the broker send the next
// deliveries), the next batch is claimed and run, instead of every slot waiting for one
// round trip after another.
const IN_FLIGHT = 2;

class Worker {
  constructor(args) {
    this.args = args;
    this.queue = `warren.ready.${args.queue}`;
    this.batchMax = Math.max(1, Math.ceil(args.concurrency / IN_FLIGHT));
    // Every call is bounded: the server cancels a statement or a lock wait after 2 s (a
    // claim_many waits at most 1 s for its due time), the client gives up on an answer after
    // 4 s and on a connection after 5 s; pg-pool drops a connection whose query failed.
    this.pool = new Pool({
      connectionString: args.databaseUrl,
      max: 6,
      statement_timeout: 2000,
      lock_timeout: 2000,
      query_timeout: 4000,
      connectionTimeoutMillis: 5000,
      keepAlive: true,
    });
    // An idle pooled connection that breaks (PostgreSQL restarted) is an 'error' event on the
    // pool: without a listener Node would end the process. The pool drops that connection and
    // the next call that needs one goes through db().
    this.pool.on('error', (e) => log(`idle database connection lost: ${e.message}`));
    this.conn = null; // AMQP connection, channel, confirm channel (dead letters)
    this.ch = null;
    this.dch = null;
    this.gen = 0; // bumped on every broker (re)connect: older deliveries cannot be acked
    this.consumerTag = null;
    this.unacked = new Map(); // deliveryTag -> delivery, in delivery order (this generation)
    this.held = []; // deliveries waiting for their due time
    this.running = new Set(); // claimed deliveries whose handler has not finished
    this.finished = []; // handler finished, completion not yet committed
    this.claiming = 0; // deliveries in claim batches in flight
    this.claims = 0; // claim batches in flight
    this.completions = 0; // completion batches in flight
    this.heartbeatBusy = false;
    this.heldTimer = null;
    this.stopping = false;
    this.pumpQueued = false;
    this.clock = { db: Date.now(), mono: mono(), at: -Infinity, rtt: Infinity };
    this.settled = 0;
  }

  // -- the database's clock, estimated: its reading plus the monotonic time since ------------
  dbNow() {
    return this.clock.db + (mono() - this.clock.mono);
  }

  // A reading is used when its round trip took at most CLOCK_RTT_MAX_MS, or less than the one
  // the estimate stands on (its midpoint is off by at most half the round trip).
  async readClock() {
    const t0 = mono();
    const r = await this.pool.query(
      'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms');
    const t1 = mono();
    const rtt = t1 - t0;
    if (this.clock.at === -Infinity) {
      // The first reading, if slow, is taken at its low end (read before the answer came),
      // which is never ahead of the database.
      const mid = rtt > CLOCK_RTT_MAX_MS ? t1 : (t0 + t1) / 2;
      this.clock = { db: Number(r.rows[0].ms), mono: mid, at: t1, rtt };
    } else if (rtt <= CLOCK_RTT_MAX_MS || rtt < this.clock.rtt) {
      this.clock = { db: Number(r.rows[0].ms), mono: (t0 + t1) / 2, at: t1, rtt };
    } else {
      this.clock.at = t1 - CLOCK_EVERY_MS + 1000; // try again in a second
    }
  }

  // -- the broker ----------------------------------------------------------------------------
  async connectBroker() {
    for (let pause = 1000; ; pause = Math.min(pause * 2, 10000)) {
      let conn = null;
      let ready = false; // until consuming, a failure is this loop's to retry
      const gen = ++this.gen;
      try {
        conn = await amqp.connect(this.args.amqpUrl, { timeout: 5000 });
        const lost = (why) => {
          if (!ready || this.gen !== gen || this.conn === null) return;
          log(`broker connection lost (${why}); reconnecting`);
          this.dropBroker();
          if (!this.stopping) this.connectBroker().catch((e) => log(`reconnect: ${e.stack}`));
        };
        // Listeners first: an 'error' event without one would end the process.
        conn.on('error', (e) => lost(e.message));
        conn.on('close', () => lost('closed'));
        const ch = await conn.createChannel();
        const dch = await conn.createConfirmChannel();
        ch.on('error', (e) => lost(`channel: ${e.message}`));
        dch.on('error', (e) => lost(`channel: ${e.message}`));
        await ch.prefetch(this.args.prefetch);
        this.conn = conn;
        this.ch = ch;
        this.dch = dch;
        const { consumerTag } = await ch.consume(this.queue, (msg) => {
          if (msg === null) { lost('consumer cancelled by the broker'); return; }
          this.onMessage(msg, gen);
        }, { noAck: false });
        this.consumerTag = consumerTag;
        ready = true;
        log(`worker ${this.args.workerId} consuming ${this.queue}`);
        return;
      } catch (e) {
        this.conn = this.ch = this.dch = null;
        if (conn) conn.close().catch(() => {});
        if (this.stopping) return;
        log(`cannot consume ${this.queue} (${e.message}); retrying in ${pause} ms`);
        await sleep(pause);
      }
    }
  }

  // The broker requeues every unacked delivery of a lost connection. Held ones are forgotten;
  // running ones go on and are completed (the database records them), but not acked: their
  // redelivery finds the run finished (or running, ours) and is acked then.
  dropBroker() {
    const conn = this.conn;
    this.conn = this.ch = this.dch = null;
    this.consumerTag = null;
    this.unacked.clear();
    this.held = [];
    if (conn) conn.close().catch(() => {});
  }

  // -- one delivery --------------------------------------------------------------------------
  onMessage(msg, gen) {
    const d = { msg, gen, tag: msg.fields.deliveryTag, runKey: null, due: 0, state: 'held',
      reholds: 0 };
    this.unacked.set(d.tag, d);
    let body;
    try {
      body = JSON.parse(msg.content.toString('utf8'));
      if (body === null || typeof body !== 'object') throw new Error('the body is not a JSON object');
      if (typeof body.run_key !== 'string' || body.run_key === '') {
        throw new Error('no "run_key" string in the body');
      }
      if (msg.properties.messageId && msg.properties.messageId !== body.run_key) {
        throw new Error(`message_id ${msg.properties.messageId} differs from run_key ${body.run_key}`);
      }
    } catch (e) {
      this.deadLetter(d, `malformed message: ${e.message}`);
      return;
    }
    d.runKey = body.run_key;
    const h = msg.properties.headers || {};
    const due = Date.parse(h['x-warren-due-at'] || body.due_at);
    // Not parseable, or due further ahead than any release lead: claim it now and let the
    // database decide (its claim gives no row for a run due more than 1 s ahead).
    d.due = Number.isFinite(due) && due - this.dbNow() <= HOLD_MAX_MS ? due : 0;
    if (this.stopping) { this.giveBack(d); return; }
    this.held.push(d);
    this.schedulePump();
  }

  // A malformed delivery: a copy to warren.dead with the reason in x-warren-error (confirmed),
  // then the original acked; if that publish fails, rejected without requeue (its queue
  // dead-letters it to warren.dead, without the reason). Never a silent drop.
  deadLetter(d, reason) {
    log(`rejecting ${reason}`);
    d.state = 'dead';
    const { msg } = d;
    const orig = msg.properties.headers;
    const headers = Object.assign({}, orig && typeof orig === 'object' ? orig : {}, {
      'x-warren-error': reason.slice(0, 1000),
      'x-warren-dead-lettered-by': this.args.workerId,
      'x-warren-source-queue': this.queue,
    });
    const reject = () => {
      if (d.gen !== this.gen || !this.ch) return;
      this.unacked.delete(d.tag);
      this.ch.reject(msg, false);
    };
    try {
      this.dch.publish('warren.dead', this.args.queue, msg.content, {
        persistent: true, messageId: msg.properties.messageId, headers,
        contentType: msg.properties.contentType,
      }, (err) => {
        if (err) { reject(); return; }
        this.settle([d]);
      });
    } catch (e) {
      reject();
    }
  }

  giveBack(d) { // not started: back to the queue at once, for another worker
    if (d.gen !== this.gen || !this.ch) return;
    this.unacked.delete(d.tag);
    this.ch.reject(d.msg, true);
  }

  // Acknowledges settled deliveries: one basic.ack with `multiple` for the settled ones at the
  // head of the delivery order (each basic.ack on a quorum queue is a Raft command in the
  // broker), one by one for those behind a delivery still open. Never before the completion
  // committed: only settle() marks a delivery, after its commit.
  settle(list) {
    for (const d of list) d.settled = true;
    if (!this.ch) return;
    let last = null;
    for (const [tag, d] of this.unacked) {
      if (!d.settled) break;
      last = d;
      this.unacked.delete(tag);
    }
    if (last) this.ch.ack(last.msg, true);
    for (const d of list) {
      if (d.gen === this.gen && this.unacked.has(d.tag)) {
        this.unacked.delete(d.tag);
        this.ch.ack(d.msg);
      }
    }
    this.settled += list.length;
  }

  // -- the loop: claim what is due, complete what finished -----------------------------------
  // Runs pump() once after the current callbacks (handlers that finish together, deliveries
  // that arrive together), so that they make one batch.
  schedulePump() {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    setImmediate(() => { this.pumpQueued = false; this.pump(); });
  }

  pump() {
    if (this.heldTimer) { clearTimeout(this.heldTimer); this.heldTimer = null; }
    if (this.claims < IN_FLIGHT && this.held.length > 0) {
      const now = this.dbNow();
      const free = Math.min(this.batchMax,
        this.args.concurrency - this.running.size - this.finished.length - this.claiming);
      const due = [];
      let next = Infinity;
      const keep = [];
      for (const d of this.held) {
        if (d.due - CLAIM_AHEAD_MS <= now && due.length < free) due.push(d);
        else { keep.push(d); next = Math.min(next, d.due); }
      }
      this.held = keep;
      if (due.length > 0) this.claimBatch(due);
      else if (next < Infinity) {
        const wait = Math.max(0, next - CLAIM_AHEAD_MS - now);
        this.heldTimer = setTimeout(() => { this.heldTimer = null; this.pump(); }, wait);
      }
    }
    if (this.completions < IN_FLIGHT && this.finished.length > 0) {
      this.completeBatch(this.finished.splice(0, this.batchMax));
    }
  }

  claimBatch(list) {
    this.claims++;
    list.sort((a, b) => (a.runKey < b.runKey ? -1 : a.runKey > b.runKey ? 1 : 0));
    for (const d of list) d.state = 'claiming';
    this.claiming += list.length;
    (async () => {
      let rows;
      try {
        rows = await this.claimRows(list.map((d) => d.runKey));
      } catch (e) {
        // A real SQL error (e.g. 22023, a bad batch): nothing was claimed. Give the deliveries
        // back after a pause, so that a refusal that comes back every time does not spin.
        log(`claim_many refused (${e.message}); giving ${list.length} deliveries back in 1 s`);
        await sleep(1000);
        for (const d of list) this.giveBack(d);
        return;
      }
      const byKey = new Map(rows.map((r) => [r.run_key, r]));
      const unclaimed = [];
      for (const d of list) {
        const r = byKey.get(d.runKey);
        if (r) this.start(d, r); // (broker lost meanwhile: run, complete, no ack)
        else unclaimed.push(d);
      }
      if (unclaimed.length > 0) await this.decideUnclaimed(unclaimed);
    })().catch((e) => log(`claim: ${e.stack}`)).finally(() => {
      this.claims--;
      this.claiming -= list.length;
      this.schedulePump();
    });
  }

  // warren.claim_many of the keys (sorted, so concurrent batches lock rows in one order),
  // retried while PostgreSQL is unreachable. A claim whose answer was lost (the connection
  // dropped after it was sent) may have committed: before claiming again, the worker takes
  // those runs back with warren.reclaim_many (a new attempt; the lost one is fenced off and
  // not counted against max_attempts), else they would wait for their lease to end.
  async claimRows(keys) {
    const sent = mono();
    let lost = false;
    for (;;) {
      try {
        let rows = [];
        let rest = keys;
        if (lost) {
          rows = (await this.pool.query(
            'SELECT run_key, attempt, job, scheduled_at, payload, lease_seconds ' +
            'FROM warren.reclaim_many($1::text[], $2::text, $3::int)',
            [keys, this.args.workerId, Math.ceil(mono() - sent) + 2000])).rows;
          if (rows.length > 0) log(`took back ${rows.length} run(s) whose claim answer was lost`);
          const have = new Set(rows.map((r) => r.run_key));
          rest = keys.filter((k) => !have.has(k));
        }
        if (rest.length > 0) {
          rows = rows.concat((await this.pool.query(
            'SELECT run_key, attempt, job, scheduled_at, payload, lease_seconds ' +
            'FROM warren.claim_many($1::text[], $2::text)', [rest, this.args.workerId])).rows);
        }
        return rows;
      } catch (e) {
        if (!dbUnavailable(e)) throw e;
        lost = true;
        log(`database unavailable during a claim (${e.message || e.code}); retrying`);
        await sleep(1000);
      }
    }
  }

  // The claim gave no row: the database decides (warren.run_states), not this process's clock.
  // A run due later (the estimate or the message was early) is held again until its due time;
  // a run that does not exist, or of a queue this login is not granted, is dead-lettered with
  // the reason; anything else (finished, leased elsewhere, held back by its overlap policy, a
  // stale copy of a retry) is a duplicate: acked and dropped, the database has the run.
  async decideUnclaimed(list) {
    let states;
    try {
      states = (await db(() => this.pool.query(
        'SELECT run_key, state, (extract(epoch FROM due_at) * 1000)::float8 AS due_ms, ' +
        '(extract(epoch FROM db_now) * 1000)::float8 AS now_ms FROM warren.run_states($1::text[])',
        [list.map((d) => d.runKey)]))).rows;
    } catch (e) {
      log(`run_states refused (${e.message}); acking ${list.length} unclaimed deliveries`);
      this.settle(list);
      return;
    }
    const byKey = new Map(states.map((s) => [s.run_key, s]));
    const dup = [];
    for (const d of list) {
      const s = byKey.get(d.runKey);
      if (!s) {
        this.deadLetter(d, `no run ${d.runKey} in the database that worker ${this.args.workerId} ` +
          'may see (unknown run, or its queue is not granted to this login: warren grant)');
      } else if (['planned', 'published', 'retrying'].includes(s.state) && s.due_ms > s.now_ms &&
                 s.due_ms - s.now_ms <= HOLD_MAX_MS && d.reholds < MAX_REHOLDS &&
                 d.gen === this.gen && !this.stopping) {
        d.reholds++;
        d.state = 'held';
        d.due = this.dbNow() + (s.due_ms - s.now_ms);
        this.held.push(d);
      } else {
        dup.push(d);
      }
    }
    if (dup.length > 0) this.settle(dup);
  }

  start(d, row) {
    d.state = 'running';
    d.run = { runKey: d.runKey, ...row };
    d.stop = { stopped: false };
    d.leaseMs = row.lease_seconds * 1000;
    d.marginMs = Math.min(5000, d.leaseMs / 3);
    d.lastOk = mono();
    d.nextHb = d.lastOk + d.leaseMs / 3;
    this.running.add(d);
    handle(d.run, d.stop, this.args)
      .catch((e) => ({ outcome: 'retry', error: `handler threw: ${e.message}` }))
      .then((result) => {
        this.running.delete(d);
        d.result = result;
        if (d.stop.stopped) { // lease lost: not ours, no completion; the database moves it on
          log(`${d.runKey} attempt ${d.run.attempt}: lease lost, not completed`);
          this.settle([d]);
          this.schedulePump();
          return;
        }
        this.finished.push(d);
        this.schedulePump();
      });
  }

  // One transaction for the whole batch: complete_many for the successes, complete for the
  // others, the effect of every recorded success; then the acks. A real SQL error rolls the
  // batch back and completes its runs one by one, so one bad run does not hold the others.
  completeBatch(list) {
    this.completions++;
    list.sort((a, b) => (a.runKey < b.runKey ? -1 : a.runKey > b.runKey ? 1 : 0));
    (async () => {
      let recorded;
      try {
        recorded = await db(() => this.completeTx(list));
      } catch (e) {
        log(`completing ${list.length} runs together failed (${e.message}); one by one`);
        recorded = new Map();
        for (const d of list) {
          try {
            const r = await db(() => this.completeTx([d]));
            recorded.set(d.runKey, r.get(d.runKey));
          } catch (e1) {
            // Not completed: left unacked; the lease runs out, the reaper retries the run.
            log(`${d.runKey} attempt ${d.run.attempt}: cannot complete (${e1.message})`);
            d.unsettled = true;
          }
        }
      }
      for (const d of list) {
        if (d.unsettled) continue;
        const ok = recorded.get(d.runKey);
        if (!ok || d.result.outcome !== 'succeeded' || this.args.workMs >= 1000) {
          log(`${d.runKey} attempt ${d.run.attempt}: ${d.result.outcome}${ok ? '' : ' (stale)'}`);
        }
      }
      this.settle(list.filter((d) => !d.unsettled)); // only after the commit
    })().catch((e) => log(`complete: ${e.stack}`)).finally(() => {
      this.completions--;
      this.schedulePump();
    });
  }

  async completeTx(list) {
    const ok = list.filter((d) => d.result.outcome === 'succeeded');
    const other = list.filter((d) => d.result.outcome !== 'succeeded');
    const recorded = new Map();
    const c = await this.pool.connect();
    let broken = null;
    try {
      await c.query('BEGIN');
      if (ok.length > 0) {
        const r = await c.query(
          'SELECT run_key, recorded FROM warren.complete_many($1::text[], $2::int[])',
          [ok.map((d) => d.runKey), ok.map((d) => d.run.attempt)]);
        for (const row of r.rows) recorded.set(row.run_key, row.recorded);
      }
      if (other.length > 0) {
        const r = await c.query(
          'SELECT t.k, warren.complete(t.k, t.a, t.o, t.e) AS ok ' +
          'FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS t(k, a, o, e)',
          [other.map((d) => d.runKey), other.map((d) => d.run.attempt),
            other.map((d) => d.result.outcome), other.map((d) => d.result.error)]);
        for (const row of r.rows) recorded.set(row.k, row.ok);
      }
      // The effect: a row keyed by the run key for every success recorded, in the same
      // transaction, so it commits exactly when the completion does (a stale attempt has none).
      const effects = ok.filter((d) => recorded.get(d.runKey)).map((d) => ({
        run_key: d.runKey, attempt: d.run.attempt, payload: d.run.payload }));
      if (effects.length > 0) {
        await c.query(
          `INSERT INTO ${this.args.table} (run_key, attempt, worker, payload)
           SELECT x.run_key, x.attempt, $2, x.payload
             FROM jsonb_to_recordset($1::jsonb) AS x(run_key text, attempt int, payload jsonb)
           ON CONFLICT (run_key) DO NOTHING`,
          [JSON.stringify(effects), this.args.workerId]);
      }
      await c.query('COMMIT');
      return recorded;
    } catch (e) {
      broken = e;
      await c.query('ROLLBACK').catch(() => {});
      throw e;
    } finally {
      c.release(broken && dbUnavailable(broken) ? broken : undefined);
    }
  }

  // -- heartbeats, lease deadlines and the clock: every 100 ms -------------------------------
  tick() {
    const now = mono();
    if (now - this.clock.at >= CLOCK_EVERY_MS) {
      this.clock.at = now; // one reading at a time
      this.readClock().catch((e) => log(`reading the database's clock: ${e.message}`));
    }
    const due = [];
    for (const d of this.running) {
      if (d.stop.stopped) continue;
      if (now - d.lastOk > d.leaseMs - d.marginMs) {
        log(`${d.runKey} attempt ${d.run.attempt}: no heartbeat for too long, stopping`);
        d.stop.stopped = true;
      } else if (now >= d.nextHb) {
        due.push(d);
      }
    }
    if (due.length === 0 || this.heartbeatBusy) return;
    this.heartbeatBusy = true;
    for (const d of due) d.nextHb = now + d.leaseMs / 3;
    this.pool.query(
      'SELECT t.i, warren.heartbeat(t.k, t.a) AS held ' +
      'FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS t(k, a, i)',
      [due.map((d) => d.runKey), due.map((d) => d.run.attempt)])
      .then((r) => {
        const t = mono();
        for (const row of r.rows) {
          const d = due[Number(row.i) - 1];
          if (row.held) d.lastOk = t;
          else if (!d.stop.stopped) {
            log(`${d.runKey} attempt ${d.run.attempt}: heartbeat refused, stopping`);
            d.stop.stopped = true;
          }
        }
      })
      .catch((e) => log(`heartbeat failed: ${e.message}`)) // the deadline above still holds
      .finally(() => { this.heartbeatBusy = false; });
  }

  async run() {
    await db(() => this.pool.query(
      `CREATE TABLE IF NOT EXISTS ${this.args.table} (run_key text PRIMARY KEY,
         attempt int NOT NULL, worker text NOT NULL, payload jsonb,
         at timestamptz NOT NULL DEFAULT now())`));
    // The estimate starts from the fastest of a few readings (a loaded machine at start-up).
    for (let i = 0; i < 5; i++) await db(() => this.readClock());
    // Open the pool's connections before the first run arrives, not during a burst.
    const warm = await Promise.all([1, 2, 3, 4].map(() => db(() => this.pool.connect())));
    for (const c of warm) c.release();
    this.ticker = setInterval(() => this.tick(), 100);
    await this.connectBroker();
    const shutdown = () => this.shutdown().catch((e) => {
      log(`shutdown: ${e.stack}`);
      process.exit(1);
    });
    process.on('SIGTERM', shutdown);
    process.on('SIGINT', shutdown);
  }

  // SIGTERM/SIGINT: stop consuming, give back what was not started, let running handlers
  // finish and their completions commit (and be acked), then exit 0.
  async shutdown() {
    if (this.stopping) return;
    this.stopping = true;
    if (this.ch && this.consumerTag) await this.ch.cancel(this.consumerTag).catch(() => {});
    for (const d of this.held.splice(0)) this.giveBack(d);
    while (this.running.size > 0 || this.finished.length > 0 || this.claims > 0 ||
           this.completions > 0) {
      await sleep(20);
    }
    clearInterval(this.ticker);
    if (this.conn) {
      const conn = this.conn;
      this.conn = null;
      await conn.close().catch(() => {});
    }
    await this.pool.end();
    log(`stopped after ${this.settled} deliveries`);
    process.exit(0);
  }
}

// Loaded by tests/node_example.sh for these (the worker runs only as the main program).
module.exports = { db, dbUnavailable, Worker, parseArgs };

if (require.main === module) {
  (async () => {
    const w = new Worker(parseArgs(process.argv));
    await w.run();
  })().catch((e) => {
    log(e.stack || String(e));
    process.exit(1);
  });
}
