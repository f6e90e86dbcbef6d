#!/usr/bin/env python3
"""bench_sql_cost.py: what warren.claim_many and warren.complete_many cost
PostgreSQL per run, one connection, no broker (JSON lines on stdout).

    eval "$(bash tests/servers.sh start)"
    python3 tests/bench_sql_cost.py [--runs N] [--batch B] [--rounds R]
        [--overlap skip [--jobs J]] [--take] [--base REF|DIR] [VARIANT.sql ...]

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
With --overlap skip (or queue, cancel_previous) the runs belong to --jobs J
jobs of that policy instead (run i to job i mod J, sorted so that each batch
of up to J keys has one run of each job): the cost of a batch of overlap
jobs' runs none of whose jobs has a run running (claim_many's `skip` path;
the other policies go through wp_claim one key at a time). With J smaller
than the batch a batch holds several keys of one job: one is claimed, the
others are skipped, and the round counts claimed + skipped runs.
With --take each round also takes and finishes the runs (warren.take_many,
then warren.finish_many, one transaction per batch: the C worker's
worker.sql_take path without the handler's statements), printed as variant
"take" (with a VARIANT.sql: "take:VARIANT.sql") with its cost in claim_us
(complete_us 0); with --overlap skip (--jobs at least --batch) the runs of
skip jobs, one a job a batch, which take_many takes under their overlap
locks.
With --base REF (or a directory laid out as sql/) a second scratch database
gets REF's sql/ (`git archive`) and the same runs, and each round runs there
as variant "base" ("take:base") in lockstep with the shipped one: batch for
batch, in turn (the order alternating), so that the two share the machine's
noise at the scale of a batch. The end prints one JSON line "summary": per
variant the median over the rounds of each column, and per column the median
over the rounds of the ratio shipped / base (below 1: cheaper now).
The database is dropped at the end. Needs psycopg2 (Debian python3-psycopg2).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import psycopg2
except ImportError:  # Debian's package, when another python3 comes first in PATH
    sys.path.append("/usr/lib/python3/dist-packages")
    import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
SQL_DIR = os.path.join(HERE, "..", "sql")


def sql_files(sql_dir=SQL_DIR):
    """The migrations in order, then the function files in functions.sql's order
    (of sql_dir: this tree's sql/, or another revision's; bench_api_cost.py)."""
    files = sorted(glob.glob(os.path.join(sql_dir, "migrations", "[0-9][0-9][0-9]_*.sql")))
    with open(os.path.join(sql_dir, "functions.sql")) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith("\\ir functions/"):
                files.append(os.path.join(sql_dir, line[len("\\ir "):]))
    return files


def backend_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


RESULTS = []


class Clock:
    """The backend's CPU time and the wall time of the timed steps, summed."""

    def __init__(self, pid):
        self.pid = pid
        self.cpu = self.wall = 0.0

    def __enter__(self):
        self.c0, self.t0 = backend_cpu_s(self.pid), time.monotonic()
        return self

    def __exit__(self, *exc):
        self.cpu += backend_cpu_s(self.pid) - self.c0
        self.wall += time.monotonic() - self.t0


def one_round(url, label, variant, runs, batch, tenants=0, per_tenant=None, overlap="allow",
              jobs=1, take=False, sql_dir=SQL_DIR):
    """One round as a generator: it yields once set up, then after each timed
    batch, so that two rounds (two databases) can run in lockstep (--base)."""
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    for f in sql_files(sql_dir):
        with open(f) as fh:
            cur.execute(fh.read())
    if variant is not None:
        with open(variant) as fh:
            cur.execute(fh.read())
    cur.execute("DELETE FROM warren.attempts; DELETE FROM warren.outbox; DELETE FROM warren.runs; "
                "DELETE FROM warren.jobs")
    # job names bench, bench1 .. bench<J-1>: run g belongs to job g mod J
    cur.execute(
        "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap) "
        "SELECT 'bench' || CASE WHEN j = 0 THEN '' ELSE j::text END, 'at', "
        "'2099-01-01T00:00:00Z', 'bench', %s FROM generate_series(0, %s - 1) j",
        (overlap, jobs))
    cur.execute("UPDATE warren.jobs SET max_running_per_tenant = %s",
                (per_tenant or runs,) if tenants > 0 else (None,))
    cur.execute(
        "INSERT INTO warren.runs (job, scheduled_at, due_at, origin, payload, state, tenant) "
        "SELECT 'bench' || CASE WHEN g %% %s = 0 THEN '' ELSE (g %% %s)::text END, "
        "date_trunc('second', now()) - make_interval(secs => g), now(), "
        "'backfill', '{\"bench\": \"sql\"}', 'published', "
        "CASE WHEN %s > 0 THEN 't' || g %% greatest(%s, 1) END FROM generate_series(1, %s) g",
        (jobs, jobs, tenants, tenants, runs))
    cur.execute("VACUUM ANALYZE warren.runs, warren.attempts, warren.outbox")
    cur.execute("CHECKPOINT")
    # each job's runs in time order, interleaved: batch after batch of one run per job
    cur.execute("SELECT run_key FROM warren.runs "
                "ORDER BY row_number() OVER (PARTITION BY job ORDER BY scheduled_at), job")
    keys = [r[0] for r in cur.fetchall()]
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    claim, complete = Clock(pid), Clock(pid)
    attempt = {}
    recorded = 0
    yield
    if take:
        # each batch one transaction: take_many, finish_many, COMMIT (the C
        # worker's sql_take path without the statements); against it the
        # shipped rounds' claim_many and complete_many, each committed
        cur.execute("SET synchronous_commit = on")
        for i in range(0, runs, batch):
            with claim:
                cur.execute("BEGIN")
                cur.execute("SELECT run_key, attempt, taken_at "
                            "FROM warren.take_many(%s, 'bench-sql')", (keys[i:i + batch],))
                got = cur.fetchall()
                attempt.update((k, a) for k, a, _ in got)
                if got:
                    cur.execute("SELECT warren.finish_many(%s, 'bench-sql', %s)",
                                ([k for k, _, _ in got], got[0][2]))
                    recorded += cur.fetchone()[0]
                cur.execute("COMMIT")
            yield
    elif overlap == "allow":
        for i in range(0, runs, batch):
            with claim:
                cur.execute("SELECT run_key, attempt FROM warren.claim_many(%s, 'bench-sql')",
                            (keys[i:i + batch],))
                attempt.update(cur.fetchall())
            yield
        for i in range(0, runs, batch):
            ks = keys[i:i + batch]
            with complete:
                cur.execute("SELECT count(*) FROM warren.complete_many(%s, %s) WHERE recorded",
                            (ks, [attempt[k] for k in ks]))
                recorded += cur.fetchone()[0]
            yield
    else:
        # each batch completed before the next is claimed (as a worker does):
        # a run of an overlap job claimed while the job's previous run is
        # still running would be skipped (or held back, or cancel it)
        for i in range(0, runs, batch):
            with claim:
                cur.execute("SELECT run_key, attempt FROM warren.claim_many(%s, 'bench-sql')",
                            (keys[i:i + batch],))
                got = cur.fetchall()
            attempt.update(got)
            with complete:
                cur.execute("SELECT count(*) FROM warren.complete_many(%s, %s) WHERE recorded",
                            ([k for k, _ in got], [n for _, n in got]))
                recorded += cur.fetchone()[0]
            yield
    skipped = runs - len(attempt)
    if skipped:
        cur.execute("SELECT count(*) FROM warren.runs WHERE state = 'skipped'")
        skipped -= cur.fetchone()[0]
    conn.close()
    if skipped != 0 or recorded != len(attempt) or (jobs >= batch and len(attempt) != runs):
        sys.exit("bench_sql_cost: %s claimed %d and completed %d of %d runs"
                 % (label, len(attempt), recorded, runs))
    per = 1e6 / runs
    RESULTS.append((label, {"claim_us": claim.wall * per, "claim_cpu_us": claim.cpu * per,
                            "complete_us": complete.wall * per,
                            "complete_cpu_us": complete.cpu * per}))
    print('{"bench":"sql_cost","variant":"%s","runs":%d,"batch":%d,"tenants":%d,'
          '"overlap":"%s","jobs":%d,"claimed":%d,'
          '"claim_us":%.1f,"claim_cpu_us":%.1f,"complete_us":%.1f,"complete_cpu_us":%.1f}'
          % (label, runs, batch, tenants, overlap, jobs, len(attempt), claim.wall * per,
             claim.cpu * per, complete.wall * per, complete.cpu * per), flush=True)


def lockstep(*rounds):
    """Runs round generators step by step, in turn (each step's order alternating)."""
    gens = list(rounds)
    flip = False
    while gens:
        for g in (gens[::-1] if flip else list(gens)):
            try:
                next(g)
            except StopIteration:
                gens.remove(g)
        flip = not flip


def summary(base):
    """Medians per variant over the rounds; with --base, shipped / base per column."""
    med = {}
    for label in dict.fromkeys(lb for lb, _ in RESULTS):
        rows = [r for lb, r in RESULTS if lb == label]
        med[label] = {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}
    out = {"bench": "sql_cost", "summary": med}
    if base:
        # per round (the two ran in lockstep), then the median of those
        ratio = {}
        for head, b in (("shipped", "base"), ("take", "take:base")):
            hs = [r for lb, r in RESULTS if lb == head]
            bs = [r for lb, r in RESULTS if lb == b]
            if hs and bs:
                ratio[head] = {k: round(statistics.median(h[k] / x[k] for h, x in zip(hs, bs)), 3)
                               for k in hs[0] if all(x[k] for x in bs)}
        out["ratio"] = ratio
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tenants", type=int, default=0)
    ap.add_argument("--per-tenant", type=int, default=None)
    ap.add_argument("--overlap", default="allow",
                    choices=["allow", "skip", "queue", "cancel_previous"])
    ap.add_argument("--jobs", type=int, default=None,
                    help="jobs the runs are spread over (default 1; with --overlap other than "
                         "allow: --batch)")
    ap.add_argument("--take", action="store_true",
                    help="also rounds of take_many + finish_many, one transaction per batch "
                         "(variant \"take\": claim_us is their cost, complete_us 0)")
    ap.add_argument("--base", metavar="REF|DIR",
                    help="also rounds of REF's sql/, or of a directory laid out as sql/ "
                         "(variant \"base\"), and the ratios")
    ap.add_argument("variants", nargs="*")
    a = ap.parse_args()
    if a.jobs is None:
        a.jobs = 1 if a.overlap == "allow" else a.batch
    if a.take and (a.overlap not in ("allow", "skip") or a.tenants):
        sys.exit("bench_sql_cost: --take is for uncapped allow or skip runs (no --tenants)")
    if a.take and a.overlap == "skip" and a.jobs < a.batch:
        sys.exit("bench_sql_cost: --take --overlap skip needs --jobs >= --batch (take_many takes "
                 "a skip job's run only when it is the job's one key in the batch)")
    if a.jobs < 1:
        sys.exit("bench_sql_cost: --jobs must be at least 1, not %d" % a.jobs)
    server = os.environ.get("WARREN_TEST_PG_URL")
    if not server:
        sys.exit("bench_sql_cost: WARREN_TEST_PG_URL is not set (eval \"$(bash tests/servers.sh env)\")")
    base_dir = None
    if a.base and os.path.isfile(os.path.join(a.base, "functions.sql")):
        base_dir = a.base  # a directory laid out as sql/
    elif a.base:
        tmp = tempfile.mkdtemp(prefix="warren-bench-sql-")
        arch = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "archive", a.base, "sql"],
                              check=True, stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
        base_dir = os.path.join(tmp, "sql")
    name = "warren_sqlcost_%d" % os.getpid()
    admin = psycopg2.connect(server)
    admin.autocommit = True
    admin.cursor().execute('CREATE DATABASE "%s"' % name)
    base, _, _ = server.rpartition("/")
    url = base + "/" + name
    try:
        if base_dir:
            admin.cursor().execute('CREATE DATABASE "%s_base"' % name)
        for rnd in range(a.rounds):
            for take in (False, True) if a.take else (False,):
                tag = "take" if take else "shipped"
                sides = [one_round(url, tag, None, a.runs, a.batch, a.tenants, a.per_tenant,
                                   a.overlap, a.jobs, take=take)]
                if base_dir:
                    sides.insert(rnd % 2, one_round(
                        url + "_base", "take:base" if take else "base", None, a.runs, a.batch,
                        a.tenants, a.per_tenant, a.overlap, a.jobs, take=take, sql_dir=base_dir))
                lockstep(*sides)
            for v in a.variants:
                lockstep(one_round(url, os.path.basename(v), v, a.runs, a.batch, a.tenants,
                                   a.per_tenant, a.overlap, a.jobs))
                if a.take:
                    lockstep(one_round(url, "take:" + os.path.basename(v), v, a.runs, a.batch,
                                       a.tenants, a.per_tenant, a.overlap, a.jobs, take=True))
        summary(base_dir is not None)
    finally:
        admin.cursor().execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
        admin.cursor().execute('DROP DATABASE IF EXISTS "%s_base" WITH (FORCE)' % name)
        admin.close()


if __name__ == "__main__":
    main()
