#!/usr/bin/env python3
"""A warren worker in Python: pika (RabbitMQ) + psycopg2 (PostgreSQL), both
from Debian (apt install python3-pika python3-psycopg2).

It speaks only warren's public contracts, so it shows what any language
needs (docs/worker-protocol.md):

  1. consume the ready queue  warren.ready.<queue>  (prefetch 1, manual ack);
  2. warren.claim(run_key, worker)        -> attempt (the fencing token) or no row
     (it waits until the run is due: messages arrive planner.release_lead early);
  3. run the handler, calling warren.heartbeat(run_key, attempt) every lease/3
     and stopping if it returns false;
  4. warren.complete(run_key, attempt, outcome, error) -> recorded?
  5. only then ack the message.

The example handler's effect is a row in a table keyed by the run key
(default warren_example_effects), written in the SAME transaction as
warren.complete: the effect commits exactly when the completion does, and a
stale attempt (complete returns false) rolls it back. Effects outside
PostgreSQL would instead use the run key as their idempotency key.

Usage:
  worker.py --queue py [--database-url URL] [--amqp-url URL] [--worker-id ID]
            [--table NAME] [--fail-first N] [--max-runs N]

URLs default to $WARREN_DATABASE_URL / $WARREN_AMQP_URL. --fail-first N
reports outcome 'retry' for attempts <= N (to watch retries with backoff).
SIGTERM/SIGINT: finish the current run, then exit 0.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

import pika
import psycopg2
import psycopg2.extensions
from psycopg2 import sql as pgsql

stopping = False


def on_signal(signum, frame):
    global stopping
    stopping = True


def log(msg):
    print(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "py-worker", msg,
          file=sys.stderr, flush=True)


class Worker:
    def __init__(self, args):
        self.args = args
        self.worker_id = args.worker_id or "%s:%d:py" % (socket.gethostname(), os.getpid())
        self.db = psycopg2.connect(args.database_url)  # claim/heartbeat (autocommit)
        self.db.autocommit = True
        self.done = 0
        with self.db.cursor() as cur:
            cur.execute(pgsql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (run_key text PRIMARY KEY, attempt int NOT NULL,"
                " worker text NOT NULL, payload jsonb, at timestamptz NOT NULL DEFAULT now())"
            ).format(pgsql.Identifier(args.table)))

    # -- the protocol -----------------------------------------------------------
    def claim(self, run_key):
        with self.db.cursor() as cur:
            cur.execute("SELECT attempt, job, scheduled_at, payload, lease_seconds"
                        " FROM warren.claim(%s, %s)", (run_key, self.worker_id))
            return cur.fetchone()

    def heartbeat(self, hb_db, run_key, attempt):
        with hb_db.cursor() as cur:
            cur.execute("SELECT warren.heartbeat(%s, %s)", (run_key, attempt))
            return cur.fetchone()[0]

    def complete_with_effect(self, run_key, attempt, outcome, error, payload):
        """warren.complete and the effect in one transaction."""
        conn = self.db
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT warren.complete(%s, %s, %s, %s)",
                            (run_key, attempt, outcome, error))
                recorded = cur.fetchone()[0]
                if recorded and outcome == "succeeded":
                    cur.execute(pgsql.SQL(
                        "INSERT INTO {} (run_key, attempt, worker, payload) VALUES (%s, %s, %s, %s)"
                        " ON CONFLICT (run_key) DO NOTHING").format(
                            pgsql.Identifier(self.args.table)),
                        (run_key, attempt, self.worker_id, json.dumps(payload)))
            if recorded:
                conn.commit()
            else:
                conn.rollback()  # stale token: no effect
            return recorded
        except Exception:
            conn.rollback()
            raise
        finally:
            conn.autocommit = True

    # -- the handler ------------------------------------------------------------
    def handle(self, run_key, job, attempt, payload, stop):
        """The work. Returns (outcome, error). Polls stop (lease lost)."""
        if attempt <= self.args.fail_first:
            return "retry", "failing attempt %d on purpose (--fail-first)" % attempt
        for _ in range(int(self.args.work_seconds * 10)):
            if stop.is_set():
                return "retry", "stopped"
            time.sleep(0.1)
        return "succeeded", None

    # -- one message ------------------------------------------------------------
    def on_message(self, ch, method, props, body):
        try:
            msg = json.loads(body)
            run_key = msg["run_key"]
            if not isinstance(run_key, str) or (props.message_id and props.message_id != run_key):
                raise ValueError("run_key/message_id mismatch")
        except Exception as e:  # malformed: dead-letter it (the queue's DLX is warren.dead)
            log("rejecting malformed message: %s" % e)
            ch.basic_reject(method.delivery_tag, requeue=False)
            return
        while True:
            try:
                row = self.claim(run_key)
                break
            except psycopg2.OperationalError as e:  # PostgreSQL away: keep the message, retry
                log("claim failed (%s); retrying" % e)
                self.reconnect()
            except psycopg2.Error as e:  # refused (e.g. 42501: this login is not granted the
                # run's queue; the message names the `warren grant` to run): give it back
                log("claim refused (%s): giving the message back" % str(e).strip())
                time.sleep(1)
                ch.basic_nack(method.delivery_tag, requeue=True)
                return
        if row is None:  # finished, leased elsewhere, held back: the database has it
            ch.basic_ack(method.delivery_tag)
            return
        attempt, job, scheduled_at, payload, lease_seconds = row
        log("claimed %s attempt %d" % (run_key, attempt))
        stop = threading.Event()
        result = {}

        def run():
            try:
                result["r"] = self.handle(run_key, job, attempt, payload, stop)
            except Exception as e:
                result["r"] = ("retry", "handler raised %r" % e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        hb_db = psycopg2.connect(self.args.database_url)
        hb_db.autocommit = True
        last_ok = time.monotonic()
        next_hb = last_ok + lease_seconds / 3.0
        lost = False
        while t.is_alive():
            # Keeps the AMQP connection serviced while the handler works.
            ch.connection.process_data_events(time_limit=0.05)
            t.join(0.05)
            now = time.monotonic()
            if not t.is_alive() or now < next_hb:
                continue
            next_hb = now + lease_seconds / 3.0
            try:
                if self.heartbeat(hb_db, run_key, attempt):
                    last_ok = time.monotonic()
                else:
                    log("%s attempt %d: heartbeat refused, stopping" % (run_key, attempt))
                    lost = True
            except psycopg2.Error as e:
                log("heartbeat failed: %s" % e)
            if time.monotonic() - last_ok > lease_seconds - min(5.0, lease_seconds / 3.0):
                log("%s attempt %d: no heartbeat for too long, stopping" % (run_key, attempt))
                lost = True
            if lost:
                stop.set()
                t.join()
                break
        hb_db.close()
        if lost:  # not ours any more: no completion; the database moves the run on
            ch.basic_ack(method.delivery_tag)
            return
        outcome, error = result.get("r", ("retry", "no result"))
        while True:
            try:
                recorded = self.complete_with_effect(run_key, attempt, outcome, error, payload)
                break
            except psycopg2.OperationalError as e:  # never ack before the completion committed
                log("complete failed (%s); retrying" % e)
                self.reconnect()
        log("%s attempt %d: %s%s" % (run_key, attempt, outcome,
                                     "" if recorded else " (stale: not recorded)"))
        ch.basic_ack(method.delivery_tag)
        self.done += 1
        if self.args.max_runs and self.done >= self.args.max_runs:
            global stopping
            stopping = True

    def reconnect(self):
        time.sleep(1)
        try:
            self.db.close()
        except Exception:
            pass
        try:
            self.db = psycopg2.connect(self.args.database_url)
            self.db.autocommit = True
        except psycopg2.OperationalError:
            pass

    def run(self):
        params = pika.URLParameters(self.args.amqp_url)
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
        queue = "warren.ready." + self.args.queue
        log("worker %s consuming %s" % (self.worker_id, queue))
        for method, props, body in ch.consume(queue, inactivity_timeout=0.5):
            if stopping:
                break
            if method is None:
                continue
            self.on_message(ch, method, props, body)
            if stopping:
                break
        ch.cancel()  # unacked prefetched messages (none: prefetch 1) return to the queue
        conn.close()
        log("stopped after %d run(s)" % self.done)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", required=True, help="job queue (consumes warren.ready.QUEUE)")
    ap.add_argument("--database-url", default=os.environ.get("WARREN_DATABASE_URL"))
    ap.add_argument("--amqp-url", default=os.environ.get("WARREN_AMQP_URL"))
    ap.add_argument("--worker-id")
    ap.add_argument("--table", default="warren_example_effects")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--work-seconds", type=float, default=0.1)
    ap.add_argument("--max-runs", type=int, default=0)
    args = ap.parse_args()
    if not args.database_url or not args.amqp_url:
        ap.error("set --database-url/--amqp-url or WARREN_DATABASE_URL/WARREN_AMQP_URL")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    Worker(args).run()


if __name__ == "__main__":
    main()
