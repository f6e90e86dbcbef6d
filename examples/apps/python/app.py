#!/usr/bin/env python3
"""A SaaS application's sign-up, creating its warren schedules in its own transaction.

warren's SQL API (docs/api-jobs.md) is called inside the
application's transaction: the customer row, the customer's schedules and a
one-shot welcome run commit together or not at all. A rollback leaves no job
and no run and sends no message; a commit is delivered once.

  app.py --database-url URL signup TENANT EMAIL ZONE [--welcome-in SECONDS]
  app.py --database-url URL signup-fails TENANT EMAIL ZONE
  app.py --database-url URL cancel TENANT

signup, for customer TENANT in time zone ZONE, in ONE transaction:
  - INSERT the customer into the application's own table app_customers;
  - warren.upsert_job('usage-report.TENANT', 'usage-report', ...): a report
    every day at 09:00 in the customer's zone (cron + timezone), tenant TENANT;
  - warren.upsert_job('account-sync.TENANT', 'account-sync', ...): every 15
    minutes with a per-job jitter;
  - warren.enqueue('welcome', 'welcome:TENANT:EMAIL', now() + SECONDS, ...):
    one welcome message; the key makes a repeated sign-up (a retried HTTP
    request) harmless: the second call creates nothing and says which run
    holds the key.
signup-fails does the same and then fails (the e-mail address is refused
after the calls): the transaction rolls back and nothing of it exists.
cancel pauses the customer's report and deletes its sync job (history kept).

Connect as a login that is a member of warren_producer and may write
app_customers (the application's table): least privilege, nothing else.
psycopg2 comes from Debian (python3-psycopg2).
"""
import argparse
import json
import sys

import psycopg2


def signup(conn, tenant, email, zone, welcome_in, fail_after=False):
    with conn:  # one transaction: commit on success, rollback on any exception
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO app_customers (tenant, email, zone) VALUES (%s, %s, %s) RETURNING id",
                (tenant, email, zone))
            customer_id = cur.fetchone()[0]
            report = {"cron": "0 9 * * *", "timezone": zone, "tenant": tenant,
                      "payload": {"customer": customer_id, "report": "usage"}}
            cur.execute("SELECT * FROM warren.upsert_job(%s, 'usage-report', %s::jsonb)",
                        ("usage-report." + tenant, json.dumps(report)))
            print("usage-report.%s: %s" % (tenant, cur.fetchone()), file=sys.stderr)
            sync = {"every": "15m", "jitter": "30s", "tenant": tenant,
                    "payload": {"customer": customer_id}}
            cur.execute("SELECT * FROM warren.upsert_job(%s, 'account-sync', %s::jsonb)",
                        ("account-sync." + tenant, json.dumps(sync)))
            print("account-sync.%s: %s" % (tenant, cur.fetchone()), file=sys.stderr)
            cur.execute(
                "SELECT * FROM warren.enqueue('welcome', %s, now() + make_interval(secs => %s),"
                " %s::jsonb, %s)",
                ("welcome:%s:%s" % (tenant, email), welcome_in,
                 json.dumps({"customer": customer_id, "email": email}), tenant))
            print("welcome: %s" % (cur.fetchone(),), file=sys.stderr)
            if fail_after:
                raise RuntimeError("sign-up refused after the schedules were created: "
                                   "the transaction rolls back")


def cancel(conn, tenant):
    with conn:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM warren.pause_job(%s)", ("usage-report." + tenant,))
            cur.execute("SELECT * FROM warren.delete_job(%s)", ("account-sync." + tenant,))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("signup", "signup-fails"):
        p = sub.add_parser(name)
        p.add_argument("tenant")
        p.add_argument("email")
        p.add_argument("zone")
        p.add_argument("--welcome-in", type=float, default=60.0,
                       help="seconds from the sign-up to the welcome message (default 60)")
    p = sub.add_parser("cancel")
    p.add_argument("tenant")
    a = ap.parse_args()
    conn = psycopg2.connect(a.database_url, connect_timeout=10,
                            options="-c statement_timeout=10000")
    try:
        if a.cmd == "signup":
            signup(conn, a.tenant, a.email, a.zone, a.welcome_in)
        elif a.cmd == "signup-fails":
            try:
                signup(conn, a.tenant, a.email, a.zone, a.welcome_in, fail_after=True)
            except RuntimeError as e:
                print("rolled back: %s" % e, file=sys.stderr)
        else:
            cancel(conn, a.tenant)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
