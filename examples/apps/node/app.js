#!/usr/bin/env node
// A SaaS application's sign-up, creating its warren schedules in its own
// transaction (the Node twin of examples/apps/python/app.py; docs/api-jobs.md).
//
//   node app.js --database-url URL signup TENANT EMAIL ZONE [--welcome-in SECONDS]
//   node app.js --database-url URL signup-fails TENANT EMAIL ZONE
//   node app.js --database-url URL cancel TENANT
//
// signup, in ONE transaction (BEGIN ... COMMIT on one client of the pool):
// the customer row in the application's own table app_customers, the
// customer's daily 09:00 usage report in its zone and its 15-minute account
// sync (warren.upsert_job from the templates usage-report and account-sync,
// tenant TENANT), and a one-shot welcome run (warren.enqueue, key
// welcome:TENANT:EMAIL: a repeated sign-up creates nothing). signup-fails
// does the same, then fails: ROLLBACK, nothing of it exists, no message is
// sent. cancel pauses the report and deletes the sync job (history kept).
// Connect as a member of warren_producer that may write app_customers.
'use strict';

const { Pool } = require('pg');

function parse(argv) {
  const a = { welcomeIn: 60, rest: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--database-url') a.url = argv[++i];
    else if (argv[i] === '--welcome-in') a.welcomeIn = Number(argv[++i]);
    else a.rest.push(argv[i]);
  }
  if (!a.url || a.rest.length < 2 || !Number.isFinite(a.welcomeIn)) {
    console.error('usage: node app.js --database-url URL signup|signup-fails TENANT EMAIL ZONE ' +
                  '[--welcome-in SECONDS] | cancel TENANT');
    process.exit(2);
  }
  return a;
}

// Runs fn(client) inside BEGIN/COMMIT; any error rolls back and is rethrown.
async function inTransaction(pool, fn) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const r = await fn(client);
    await client.query('COMMIT');
    return r;
  } catch (e) {
    await client.query('ROLLBACK');
    throw e;
  } finally {
    client.release();
  }
}

async function signup(pool, tenant, email, zone, welcomeIn, failAfter) {
  return inTransaction(pool, async (c) => {
    const { rows } = await c.query(
      'INSERT INTO app_customers (tenant, email, zone) VALUES ($1, $2, $3) RETURNING id',
      [tenant, email, zone]);
    const id = rows[0].id;
    const report = { cron: '0 9 * * *', timezone: zone, tenant,
                     payload: { customer: id, report: 'usage' } };
    let r = await c.query("SELECT * FROM warren.upsert_job($1, 'usage-report', $2::jsonb)",
                          [`usage-report.${tenant}`, JSON.stringify(report)]);
    console.error(`usage-report.${tenant}:`, JSON.stringify(r.rows[0]));
    const sync = { every: '15m', jitter: '30s', tenant, payload: { customer: id } };
    r = await c.query("SELECT * FROM warren.upsert_job($1, 'account-sync', $2::jsonb)",
                      [`account-sync.${tenant}`, JSON.stringify(sync)]);
    console.error(`account-sync.${tenant}:`, JSON.stringify(r.rows[0]));
    r = await c.query(
      "SELECT * FROM warren.enqueue('welcome', $1, now() + make_interval(secs => $2), $3::jsonb, $4)",
      [`welcome:${tenant}:${email}`, welcomeIn, JSON.stringify({ customer: id, email }), tenant]);
    console.error('welcome:', JSON.stringify(r.rows[0]));
    if (failAfter) throw new Error('sign-up refused after the schedules were created: rollback');
  });
}

async function cancel(pool, tenant) {
  return inTransaction(pool, async (c) => {
    await c.query('SELECT * FROM warren.pause_job($1)', [`usage-report.${tenant}`]);
    await c.query('SELECT * FROM warren.delete_job($1)', [`account-sync.${tenant}`]);
  });
}

async function main() {
  const a = parse(process.argv.slice(2));
  const pool = new Pool({ connectionString: a.url, max: 1, connectionTimeoutMillis: 10000,
                          statement_timeout: 10000 });
  try {
    const [cmd, tenant, email, zone] = a.rest;
    if (cmd === 'signup') await signup(pool, tenant, email, zone, a.welcomeIn, false);
    else if (cmd === 'signup-fails') {
      try {
        await signup(pool, tenant, email, zone, a.welcomeIn, true);
      } catch (e) {
        console.error('rolled back:', e.message);
      }
    } else if (cmd === 'cancel') await cancel(pool, tenant);
    else throw new Error(`unknown command ${cmd}`);
  } finally {
    await pool.end();
  }
}

main().catch((e) => {
  console.error('app.js:', e.message);
  process.exit(1);
});
