#!/usr/bin/env python3
"""bench_sql_cost.py: what warren.claim_many and warren.complete_many cost
PostgreSQL per run, one connection, no broker (JSON lines on stdout).

    eval "$(bash tests/servers.sh start)"
    python3 tests/bench_sql_cost.py [--runs N] [--batch B] [--rounds R] [VARIANT.sql ...]

Creates a scratch database on the server of WARREN_TEST_PG_URL, applies
sql/migrations/*.sql and the function files sql/functions.sql lists (as
`warren migrate` does), and per round: N published runs of one `allow` job, claimed in
batches of B keys (each batch its own transaction, as the C worker does),
then completed as succeeded in batches of B. It prints the wall time and the
backend's CPU time (from /proc, so the server must be on this machine) per
run. Each VARIANT.sql (e.g. another CREATE OR REPLACE FUNCTION
warren.complete_many) is applied before its own rounds, interleaved with the
shipped functions ("shipped"), so that A/B pairs share the machine's noise.
With --tenants T the job gets max_running_per_tenant = --per-tenant (default:
high enough that no run waits) and the runs T tenants in turn: the cost of
the capped claim (docs/delivery.md, "Caps") instead of claim_many's fast path.
The database is dropped at the end. Needs psycopg2 (Debian python3-psycopg2).
"""
import argparse
import glob
import os
import sys
import time

try:
    import psycopg2
except ImportError:  # Debian's package, when another python3 comes first in PATH
    sys.path.append("/usr/lib/python3/dist-packages")
    import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
SQL_DIR = os.path.join(HERE, "..", "sql")


def sql_files():
    """The migrations in order, then the function files in functions.sql's order."""
    files = sorted(glob.glob(os.path.join(SQL_DIR, "migrations", "[0-9][0-9][0-9]_*.sql")))
    with open(os.path.join(SQL_DIR, "functions.sql")) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith("\\ir functions/"):
                files.append(os.path.join(SQL_DIR, line[len("\\ir "):]))
    return files


def backend_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(url, label, variant, runs, batch, tenants=0, per_tenant=None):
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    for f in sql_files():
        with open(f) as fh:
            cur.execute(fh.read())
    if variant is not None:
        with open(variant) as fh:
            cur.execute(fh.read())
    cur.execute(
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap) "
        "VALUES ('bench', 'at', '2099-01-01T00:00:00Z', 'bench', 'allow') "
        "ON CONFLICT (name) DO NOTHING")
    cur.execute("UPDATE warren.jobs SET max_running_per_tenant = %s WHERE name = 'bench'",
                (per_tenant or runs,) if tenants > 0 else (None,))
    cur.execute("DELETE FROM warren.attempts; DELETE FROM warren.outbox; DELETE FROM warren.runs")
    cur.execute(
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload, state, tenant) "
        "SELECT 'bench', date_trunc('second', now()) - make_interval(secs => g), now(), "
        "'backfill', '{\"bench\": \"sql\"}', 'published', "
        "CASE WHEN %s > 0 THEN 't' || g %% greatest(%s, 1) END FROM generate_series(1, %s) g",
        (tenants, tenants, runs))
    cur.execute("VACUUM ANALYZE warren.runs, warren.attempts, warren.outbox")
    cur.execute("CHECKPOINT")
    cur.execute("SELECT run_key FROM warren.runs ORDER BY run_key")
    keys = [r[0] for r in cur.fetchall()]
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    attempt = {}
    c0, t0 = backend_cpu_s(pid), time.monotonic()
    for i in range(0, runs, batch):
        cur.execute("SELECT run_key, attempt FROM warren.claim_many(%s, 'bench-sql')",
                    (keys[i:i + batch],))
        attempt.update(cur.fetchall())
    c1, t1 = backend_cpu_s(pid), time.monotonic()
    recorded = 0
    for i in range(0, runs, batch):
        ks = keys[i:i + batch]
        cur.execute("SELECT count(*) FROM warren.complete_many(%s, %s) WHERE recorded",
                    (ks, [attempt[k] for k in ks]))
        recorded += cur.fetchone()[0]
    c2, t2 = backend_cpu_s(pid), time.monotonic()
    conn.close()
    if len(attempt) != runs or recorded != runs:
        sys.exit("bench_sql_cost: %s claimed %d and completed %d of %d runs"
                 % (label, len(attempt), recorded, runs))
    per = 1e6 / runs
    print('{"bench":"sql_cost","variant":"%s","runs":%d,"batch":%d,"tenants":%d,'
          '"claim_us":%.1f,"claim_cpu_us":%.1f,"complete_us":%.1f,"complete_cpu_us":%.1f}'
          % (label, runs, batch, tenants, (t1 - t0) * per, (c1 - c0) * per, (t2 - t1) * per,
             (c2 - c1) * per), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tenants", type=int, default=0)
    ap.add_argument("--per-tenant", type=int, default=None)
    ap.add_argument("variants", nargs="*")
    a = ap.parse_args()
    server = os.environ.get("WARREN_TEST_PG_URL")
    if not server:
        sys.exit("bench_sql_cost: WARREN_TEST_PG_URL is not set (eval \"$(bash tests/servers.sh env)\")")
    name = "warren_sqlcost_%d" % os.getpid()
    admin = psycopg2.connect(server)
    admin.autocommit = True
    admin.cursor().execute('CREATE DATABASE "%s"' % name)
    base, _, _ = server.rpartition("/")
    url = base + "/" + name
    try:
        for _ in range(a.rounds):
            one_round(url, "shipped", None, a.runs, a.batch, a.tenants, a.per_tenant)
            for v in a.variants:
                one_round(url, os.path.basename(v), v, a.runs, a.batch, a.tenants, a.per_tenant)
    finally:
        admin.cursor().execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
        admin.close()


if __name__ == "__main__":
    main()
