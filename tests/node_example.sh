#!/usr/bin/env bash
# node_example.sh: the Node.js example worker (examples/workers/node) without
# npm packages or servers: every .js file of the example parses (`node
# --check`), and the worker's db() retries a call while PostgreSQL is
# unreachable (Node socket errors such as ECONNREFUSED, pg's connection
# errors, SQLSTATE 08xxx / 57P0x) and rethrows real SQL errors at once (no
# server can be made to fail this way on cue). Its end-to-end run against the
# servers is tests/e2e_node_worker.sh.
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

node - "$DIR/worker.js" <<'JS' || fail "the retry rule of db() in examples/workers/node/worker.js"
'use strict';
const assert = require('assert');
const Module = require('module');
// amqplib and pg are not installed here; the worker needs them only in main(),
// which does not run when worker.js is loaded as a module.
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === 'amqplib' || request === 'pg') return {};
  return load.call(this, request, ...rest);
};
const { db } = require(process.argv[2]);

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
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
JS
