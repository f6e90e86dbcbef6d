#!/usr/bin/env bash
# node_example.sh: the Node.js example worker (examples/workers/node) without
# npm packages or servers: every .js file of the example parses (`node
# --check`), and the worker's db() retries a call while PostgreSQL is
# unreachable (Node socket errors such as ECONNREFUSED, pg's connection
# errors, SQLSTATE 08xxx / 57P0x) and rethrows real SQL errors at once (no
# server can be made to fail this way on cue). Then the worker's own
# bookkeeping, with a recording stand-in for the AMQP channel (no broker can
# be made to deliver in a chosen order on cue): acknowledgements (one
# multiple-ack for the settled head of the delivery order, single acks behind
# an open delivery, never an open one), holding (a delivery due later is not
# claimed until due; due ones go in one batch, keys sorted) and the dead
# letter of a malformed message (a copy with the reason, the original acked
# only after the copy's confirm). Its end-to-end run against the servers is
# tests/e2e_node_worker.sh.
# Fails (never skips) when node is missing.
set -euo pipefail

fail() {
    echo "node_example: FAIL: $*" >&2
    exit 1
}
SRC=${WARREN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
DIR="$SRC/examples/workers/node"
command -v node >/dev/null 2>&1 ||
    fail "node not found: install the Debian package nodejs (bash scripts/deps.sh does)"
[ -f "$DIR/worker.js" ] || fail "no $DIR/worker.js"

n=0
while IFS= read -r -d '' f; do
    node --check "$f" || fail "node --check ${f#"$SRC"/}"
    n=$((n + 1))
done < <(find "$DIR" -name node_modules -prune -o -type f \( -name '*.js' -o -name '*.mjs' -o -name '*.cjs' \) -print0)
[ "$n" -gt 0 ] || fail "no .js files under $DIR"
echo "node_example: node $(node --version): $n file(s) pass node --check"

node - "$DIR/worker.js" <<'JS' || fail "examples/workers/node/worker.js: the retry rule of db(), holding, claim batches, acks or dead letters"
'use strict';
const assert = require('assert');
const Module = require('module');
// amqplib and pg are not installed here; the worker needs them only in main(),
// which does not run when worker.js is loaded as a module.
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === 'amqplib') return {};
  if (request === 'pg') return { Pool: class { on() {} } };
  return load.call(this, request, ...rest);
};
const { db, Worker, parseArgs } = require(process.argv[2]);

const socketError = (code) =>
  Object.assign(new Error(`connect ${code} 127.0.0.1:55432`), { code, syscall: 'connect' });
const sqlError = (code) => Object.assign(new Error(`SQLSTATE ${code}`), { code, severity: 'ERROR' });
const unreachable = [
  socketError('ECONNREFUSED'), socketError('ECONNRESET'), socketError('ETIMEDOUT'),
  socketError('EPIPE'), socketError('EHOSTUNREACH'),
  new Error('Connection terminated unexpectedly'), // pg, no code
  new Error('timeout exceeded when trying to connect'), // pg-pool, no code
  sqlError('08006'), sqlError('57P01'), sqlError('57P03'),
];
const real = [sqlError('23505'), sqlError('42P01'), sqlError('22023'), sqlError('40001')];

(async () => {
  for (const e of unreachable) {
    let calls = 0;
    const got = await db(async () => {
      if (++calls <= 2) throw e;
      return 'done';
    }, 1);
    assert.strictEqual(got, 'done', `${e.code || e.message}: db() did not return the result`);
    assert.strictEqual(calls, 3, `${e.code || e.message}: retried ${calls - 1} times, want 2`);
  }
  for (const e of real) {
    let calls = 0;
    // A second call means db() retried: it returns then, so a retrying db() ends too.
    await assert.rejects(db(async () => {
      if (++calls === 1) throw e;
      return 'retried';
    }, 1), (x) => x === e, `${e.code}: db() did not rethrow the SQL error`);
    assert.strictEqual(calls, 1, `${e.code}: a real SQL error was retried`);
  }
  console.log(`node_example: db() retries ${unreachable.length} kinds of unreachable database, ` +
    `rethrows ${real.length} SQL errors at once`);
  console.error = () => {}; // the worker's log lines from here on

  // A worker with a recording channel instead of a broker.
  const w = new Worker(parseArgs(['node', 'worker.js', '--queue', 'q', '--database-url', 'x',
    '--amqp-url', 'y', '--concurrency', '8', '--worker-id', 'w1']));
  const acks = [];
  const published = [];
  let confirm = null;
  w.ch = {
    ack: (m, multiple) => acks.push([m.fields.deliveryTag, !!multiple]),
    reject: (m, requeue) => acks.push([m.fields.deliveryTag, `reject ${requeue}`]),
  };
  w.dch = { publish: (ex, rk, body, opts, cb) => { published.push({ ex, rk, body, opts }); confirm = cb; } };
  w.gen = 1;
  const claimed = [];
  w.claimBatch = (list) => claimed.push(list.map((d) => d.runKey));
  w.clock = { db: Date.parse('2030-01-01T00:00:00Z'), mono: require('perf_hooks').performance.now(), at: 0 };
  const msg = (tag, key, due) => ({
    fields: { deliveryTag: tag }, content: Buffer.from(JSON.stringify({ run_key: key, due_at: due })),
    properties: { messageId: key, headers: { 'x-warren-due-at': due } },
  });
  // Tags 1-4 due now (keys out of order), 5 due in 5 s, 6 malformed.
  const now = '2030-01-01T00:00:00.000Z';
  const later = '2030-01-01T00:00:05.000Z';
  w.onMessage(msg(1, 'j@d', now), 1);
  w.onMessage(msg(2, 'j@b', now), 1);
  w.onMessage(msg(3, 'j@c', now), 1);
  w.onMessage(msg(4, 'j@a', now), 1);
  w.onMessage(msg(5, 'j@later', later), 1);
  w.onMessage({ fields: { deliveryTag: 6 }, content: Buffer.from('not json'),
    properties: { headers: { keep: 'me' } } }, 1);
  await new Promise((r) => setImmediate(r));
  w.pump();
  clearTimeout(w.heldTimer);
  assert.deepStrictEqual(claimed, [['j@d', 'j@b', 'j@c', 'j@a']],
    'the due deliveries were not claimed in one batch, or the later one was claimed early');
  assert.deepStrictEqual(w.held.map((d) => d.runKey), ['j@later'], 'the later delivery is not held');
  // The malformed one: a copy with the reason, nothing acked before its confirm.
  assert.strictEqual(published.length, 1, 'no dead-letter copy of the malformed message');
  const dl = published[0];
  assert.strictEqual(dl.ex, 'warren.dead');
  assert.match(dl.opts.headers['x-warren-error'], /^malformed message: /);
  assert.strictEqual(dl.opts.headers['x-warren-source-queue'], 'warren.ready.q');
  assert.strictEqual(dl.opts.headers.keep, 'me', 'the original headers were not kept');
  assert.deepStrictEqual(acks, [], 'acked before anything was settled');
  const d = (tag) => w.unacked.get(tag);
  const [d1, d2, d3, d4, d5] = [1, 2, 3, 4, 5].map(d);
  // 2 and 3 settle first: behind the open 1, each on its own; the held 5 stays open.
  w.settle([d2, d3]);
  assert.deepStrictEqual(acks, [[2, false], [3, false]]);
  // 4 and 1 settle: the head is 1, 4 (2 and 3 are acked): one multiple-ack up to 4,
  // which stops before the open 5.
  w.settle([d4, d1]);
  assert.deepStrictEqual(acks.slice(2), [[4, true]]);
  assert.deepStrictEqual([...w.unacked.keys()], [5, 6], 'a multiple-ack passed an open delivery');
  confirm(null); // the copy is confirmed: the malformed original (behind the open 5) is acked
  assert.deepStrictEqual(acks.slice(3), [[6, false]]);
  assert.deepStrictEqual([...w.unacked.keys()], [5], 'only the held delivery is open');
  w.settle([d5]);
  assert.deepStrictEqual(acks.slice(4), [[5, true]]);
  console.log('node_example: holding, batch claims, acknowledgements and dead letters as specified');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
JS
