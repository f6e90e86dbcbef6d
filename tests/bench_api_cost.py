#!/usr/bin/env python3
"""bench_api_cost.py: what the Job API's bulk calls cost PostgreSQL, this
tree's sql/ against another revision's, side by side (JSON lines on stdout).

    eval "$(bash tests/servers.sh start)"
    python3 tests/bench_api_cost.py [--base REF] [--rounds R] [--runs N] [--jobs J]
        [--only enqueue_many|upsert_jobs] [--logins owner,producer]

Makes two scratch databases on the server of WARREN_TEST_PG_URL: "base",
migrated with REF's sql/ (default fcce054, the revision issue 33 was filed
against; `git archive`), and "head", with this tree's sql/. Each has one
template `tmpl` and a producer login `warren_bench_producer` (in "head"
granted the template, `warren.grant_producer`; at fcce054 a member of
warren_producer needed no grant). Then R rounds, the two databases in
alternating order within each round (so that each pair shares the
machine's noise), each call its own transaction, after a VACUUM ANALYZE
and a CHECKPOINT of its database:

    enqueue_many  one call of N runs (default 20,000) with fresh keys
    upsert_jobs   one call of J new API jobs (default 10,000)

once as the owner (a superuser here) and once as the producer. For each
it prints the backend's CPU time (from /proc, so the server must be on this
machine) and the wall time; at the end, per call and login, the median
ratio head/base of the backend CPU over the rounds. The JSON text of each
call is built here and sent as a parameter, so the server's work is the
call. The databases and the login are dropped at the end. Needs psycopg2
(Debian python3-psycopg2).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit, urlunsplit

try:
    import psycopg2
except ImportError:  # Debian's package, when another python3 comes first in PATH
    sys.path.append("/usr/lib/python3/dist-packages")
    import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
from bench_sql_cost import backend_cpu_s, sql_files  # noqa: E402  (psycopg2 as above)
PRODUCER = "warren_bench_producer"


def with_db(url, db, user=None):
    u = urlsplit(url)
    netloc = u.netloc
    if user is not None:
        netloc = user + "@" + netloc.split("@", 1)[-1]
    return urlunsplit((u.scheme, netloc, "/" + db, u.query, u.fragment))


def setup_db(admin_url, name, sql_dir, grant):
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    conn.cursor().execute('CREATE DATABASE "%s"' % name)
    conn.close()
    url = with_db(admin_url, name)
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    for f in sql_files(sql_dir):
        with open(f) as fh:
            cur.execute(fh.read())
    cur.execute("INSERT INTO warren.jobs (name, schedule_kind, expression, queue, overlap, "
                "is_template, paused, next_fire_at) VALUES "
                "('tmpl', 'none', '', 'q', 'allow', true, true, 'infinity')")
    if grant:
        cur.execute("SELECT warren.grant_producer(%s, '{tmpl}', NULL, NULL)", (PRODUCER,))
    conn.close()
    return url


def settle(url):
    """Before each timed call: the same starting point for both databases
    (no dirty buffers to write back, no autovacuum or hint bits pending)."""
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("VACUUM ANALYZE warren.runs, warren.jobs")
    cur.execute("CHECKPOINT")
    conn.close()


def timed(url, sql, arg):
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    c0, t0 = backend_cpu_s(pid), time.monotonic()
    cur.execute(sql, (arg,))
    n = cur.fetchone()[0]
    c1, t1 = backend_cpu_s(pid), time.monotonic()
    conn.close()
    return n, c1 - c0, t1 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="fcce054")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--only", choices=["enqueue_many", "upsert_jobs"],
                    help="measure this call alone")
    ap.add_argument("--logins", default="owner,producer",
                    help="owner, producer or both (comma-separated)")
    a = ap.parse_args()
    admin = os.environ.get("WARREN_TEST_PG_URL")
    if not admin:
        sys.exit("bench_api_cost: set WARREN_TEST_PG_URL (eval \"$(bash tests/servers.sh env)\")")
    tmp = tempfile.mkdtemp(prefix="warren-bench-api-")
    arch = subprocess.run(["git", "-C", REPO, "archive", a.base, "sql"], check=True,
                          stdout=subprocess.PIPE).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
    suffix = "%d" % os.getpid()
    dbs = {}
    conn = psycopg2.connect(admin)
    conn.autocommit = True
    acur = conn.cursor()
    try:
        acur.execute("DROP ROLE IF EXISTS %s" % PRODUCER)
        acur.execute("CREATE ROLE %s LOGIN" % PRODUCER)
        dbs["base"] = setup_db(admin, "warren_bench_base_" + suffix, os.path.join(tmp, "sql"),
                               False)
        acur.execute("GRANT warren_producer TO %s" % PRODUCER)  # the role exists by now
        dbs["head"] = setup_db(admin, "warren_bench_head_" + suffix, os.path.join(REPO, "sql"),
                               True)
        cpu = {}
        for r in range(1, a.rounds + 1):
            runs = json.dumps([{"job": "tmpl", "key": "r%d-%d" % (r, g),
                                "payload": {"user": g}} for g in range(a.runs)])
            jobs = json.dumps([{"name": "r%d-j%d" % (r, g), "template": "tmpl", "every": "1h",
                                "tenant": "t%d" % (g % 100)} for g in range(a.jobs)])
            order = ["base", "head"] if r % 2 else ["head", "base"]
            for who in a.logins.split(","):
                for side in order:
                    url = dbs[side] if who == "owner" else with_db(
                        admin, urlsplit(dbs[side]).path[1:], PRODUCER)
                    for call, sql, arg, want in (
                            ("enqueue_many", "SELECT count(*) FILTER (WHERE created) FROM "
                             "warren.enqueue_many(%s::jsonb)", runs, a.runs),
                            ("upsert_jobs", "SELECT count(*) FILTER (WHERE result = 'created') "
                             "FROM warren.upsert_jobs(%s::jsonb)", jobs, a.jobs)):
                        if a.only is not None and call != a.only:
                            continue
                        if who == "producer":
                            arg = arg.replace('"r%d-' % r, '"p%d-' % r)
                        settle(dbs[side])
                        n, c, w = timed(url, sql, arg)
                        if n != want:
                            sys.exit("bench_api_cost: %s %s as %s created %d of %d"
                                     % (side, call, who, n, want))
                        cpu.setdefault((call, who, side), []).append(c)
                        print(json.dumps({"bench": "api_cost", "round": r, "side": side,
                                          "rev": a.base if side == "base" else "tree",
                                          "call": call, "login": who, "elements": n,
                                          "backend_cpu_s": round(c, 3), "wall_s": round(w, 3),
                                          "loadavg": open("/proc/loadavg").read().split()[0]}),
                              flush=True)
        for call in ("enqueue_many", "upsert_jobs"):
            for who in a.logins.split(","):
                if (call, who, "head") not in cpu:
                    continue
                ratios = [h / b for h, b in zip(cpu[(call, who, "head")],
                                                cpu[(call, who, "base")]) if b > 0]
                print(json.dumps({"bench": "api_cost_ratio", "call": call, "login": who,
                                  "base": a.base, "rounds": len(ratios),
                                  "cpu_ratio_median": round(statistics.median(ratios), 3),
                                  "cpu_min_ratio": round(min(cpu[(call, who, "head")]) /
                                                         min(cpu[(call, who, "base")]), 3),
                                  "cpu_ratios": [round(x, 3) for x in ratios]}), flush=True)
    finally:
        for url in dbs.values():
            acur.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % urlsplit(url).path[1:])
        acur.execute("DROP ROLE IF EXISTS %s" % PRODUCER)
        conn.close()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
