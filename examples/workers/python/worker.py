#!/usr/bin/env python3
"""A warren worker in Python: pika (RabbitMQ) + psycopg2 (PostgreSQL), both
from Debian (apt install python3-pika python3-psycopg2).

It speaks only warren's public contracts, so it shows what any language
needs (docs/worker-protocol.md), with the batch forms of the protocol:

  1. consume the ready queue  warren.ready.<queue>  (prefetch = --concurrency,
     manual acks); hold each delivery until its run is due, on an estimate of
     the database's clock (messages arrive planner.release_lead early);
  2. warren.claim_many(run_keys, worker) for every due delivery at once: a row
     per claimed run (attempt = the fencing token); a key without a row is
     decided by warren.run_states (due later: hold it again; unknown: dead
     letter; anything else: a duplicate, ack it);
  3. run the handlers on a pool of threads; warren.heartbeat for every running
     run in one statement every lease/3; a refused heartbeat, or none for the
     lease minus a margin: stop the handler and do not complete;
  4. complete the finished runs in ONE transaction: warren.complete_many for the
     successes, warren.complete for the others, and the effect rows;
  5. only then ack them (one basic.ack with multiple where it can).

The example handler's effect is a row in a table keyed by the run key
(default warren_example_effects), written in the SAME transaction as the
completion: the effect commits exactly when the completion does, and a stale
attempt (not recorded) has none. Effects outside PostgreSQL would instead use
the run key as their idempotency key.

Usage:
  worker.py --queue py [--database-url URL] [--amqp-url URL] [--worker-id ID]
            [--table NAME] [--concurrency N] [--prefetch N] [--fail-first N]
            [--work-seconds S] [--max-runs N]

URLs default to $WARREN_DATABASE_URL / $WARREN_AMQP_URL. --fail-first N
reports outcome 'retry' for attempts <= N (to watch retries with backoff).
SIGTERM/SIGINT: stop consuming, give back what was not started, let the
running handlers finish and complete, then exit 0.
"""

import argparse
import calendar
import collections
import concurrent.futures
import json
import os
import queue
import re
import signal
import socket
import sys
import threading
import time

import pika
import pika.exceptions
import psycopg2
import psycopg2.extensions
from psycopg2 import sql as pgsql

stopping = False

# A delivery is held until its run is due, at most this far ahead of the
# database's clock (planner.release_lead, 3 s by default, plus slack): one due
# further ahead (a corrupt due_at) is claimed at once and the database decides.
HOLD_MAX_S = 10.0
# Claimed this long before the due time on the estimate: warren.claim_many
# waits for the due time on the database's clock (at most 1 s): never early.
CLAIM_AHEAD_S = 0.002
# The database's clock is read again this often; a reading whose round trip
# took longer than CLOCK_RTT_MAX_S is not used (its midpoint could be off).
CLOCK_EVERY_S = 10.0
CLOCK_RTT_MAX_S = 0.02
MAX_REHOLDS = 3
# Every database call is bounded: the server cancels a statement or a lock
# wait after 2 s (claim_many waits at most 1 s for a due time); TCP keepalives
# find a silent server; connecting gives up after 5 s.
DB_OPTIONS = "-c statement_timeout=2000 -c lock_timeout=2000"


def on_signal(signum, frame):
    global stopping
    stopping = True


def log(msg):
    print(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "py-worker", msg,
          file=sys.stderr, flush=True)


def parse_time(s):
    """RFC 3339 UTC ('2026-11-30T14:00:00.250Z') -> epoch seconds, or None."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?Z", s or "")
    if not m:
        return None
    t = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
    return t + (float(m.group(7)) if m.group(7) else 0.0)


def unavailable(e):
    """PostgreSQL unreachable (retry, messages unacked) rather than a real SQL error."""
    if isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        code = getattr(e, "pgcode", None)
        return code is None or code.startswith("08") or code.startswith("57P0")
    return False


class Delivery:
    __slots__ = ("tag", "gen", "run_key", "due", "settled", "reholds", "run", "stop",
                 "lease", "margin", "last_ok", "next_hb", "result")

    def __init__(self, tag, gen):
        self.tag, self.gen = tag, gen
        self.run_key, self.due, self.settled, self.reholds = None, 0.0, False, 0
        self.run = self.result = None
        self.stop = threading.Event()


class Worker:
    def __init__(self, args):
        self.args = args
        self.worker_id = args.worker_id or "%s:%d:py" % (socket.gethostname(), os.getpid())
        self.queue = "warren.ready." + args.queue
        self.db = None
        self.connect_db()
        self.done = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency)
        self.results = queue.Queue()  # handler threads -> the loop
        self.conn = self.ch = self.dch = None
        self.gen = 0
        self.unacked = collections.OrderedDict()  # delivery tag -> Delivery (this connection)
        self.held = []
        self.running = set()
        self.finished = []
        self.clock = (time.time(), time.monotonic())  # (database time, monotonic) of a reading
        self.clock_at, self.clock_rtt = -1e9, float("inf")
        self.db_call(self.create_table)
        for _ in range(5):  # the estimate starts from the fastest of a few readings
            self.db_call(self.read_clock)

    # -- PostgreSQL ---------------------------------------------------------------
    def connect_db(self):
        try:
            if self.db is not None:
                self.db.close()
        except Exception:
            pass
        self.db = None
        self.db = psycopg2.connect(self.args.database_url, connect_timeout=5,
                                   options=DB_OPTIONS, keepalives=1, keepalives_idle=10,
                                   keepalives_interval=5, keepalives_count=3)
        self.db.autocommit = True

    def db_call(self, fn, *a):
        """fn(cursor, *a) until it succeeds or fails with a real SQL error (raised),
        reconnecting every second while PostgreSQL is unreachable; the broker
        connection and the lease deadlines are serviced meanwhile."""
        while True:
            try:
                if self.db is None:
                    self.connect_db()
                with self.db.cursor() as cur:
                    return fn(cur, *a)
            except psycopg2.Error as e:
                if not unavailable(e):
                    raise
                log("database unavailable (%s); retrying" % str(e).strip())
                try:
                    self.db.close()
                except Exception:
                    pass
                self.db = None
                self.pause(1.0)

    def pause(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check_deadlines()
            if self.conn is not None and self.conn.is_open:
                try:
                    self.conn.sleep(min(0.1, max(0.0, end - time.monotonic())))
                    continue
                except pika.exceptions.AMQPError:
                    pass
            time.sleep(0.1)

    def create_table(self, cur):
        cur.execute(pgsql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (run_key text PRIMARY KEY, attempt int NOT NULL,"
            " worker text NOT NULL, payload jsonb, at timestamptz NOT NULL DEFAULT now())"
        ).format(pgsql.Identifier(self.args.table)))

    def read_clock(self, cur):
        """A reading is used when its round trip took at most CLOCK_RTT_MAX_S, or
        less than the one the estimate stands on (the midpoint is off by at most
        half of it); the first, if slow, at its low end: never ahead."""
        t0 = time.monotonic()
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        db_s = cur.fetchone()[0]
        t1 = time.monotonic()
        rtt = t1 - t0
        if self.clock_at < 0:
            self.clock = (db_s, t1 if rtt > CLOCK_RTT_MAX_S else (t0 + t1) / 2)
            self.clock_at, self.clock_rtt = t1, rtt
        elif rtt <= CLOCK_RTT_MAX_S or rtt < self.clock_rtt:
            self.clock = (db_s, (t0 + t1) / 2)
            self.clock_at, self.clock_rtt = t1, rtt
        else:
            self.clock_at = t1 - CLOCK_EVERY_S + 1.0  # try again in a second

    def db_now(self):
        return self.clock[0] + (time.monotonic() - self.clock[1])

    # -- the protocol, in batches ----------------------------------------------------
    CLAIM_COLS = "run_key, attempt, job, scheduled_at, payload, lease_seconds"

    def claim(self, keys):
        """claim_many of the sorted keys. A claim whose answer was lost (PostgreSQL
        went away after it was sent) may have committed: the next try first takes
        those runs back with reclaim_many (a new attempt; the lost one fenced off)."""
        sent = time.monotonic()
        lost = False
        while True:
            try:
                if self.db is None:
                    self.connect_db()
                rows, rest = [], keys
                with self.db.cursor() as cur:
                    if lost:
                        cur.execute("SELECT " + self.CLAIM_COLS + " FROM warren.reclaim_many("
                                    "%s::text[], %s, %s)", (keys, self.worker_id,
                                                            int((time.monotonic() - sent) * 1000)
                                                            + 2000))
                        rows = cur.fetchall()
                        if rows:
                            log("took back %d run(s) whose claim answer was lost" % len(rows))
                        have = {r[0] for r in rows}
                        rest = [k for k in keys if k not in have]
                    if rest:
                        cur.execute("SELECT " + self.CLAIM_COLS + " FROM warren.claim_many("
                                    "%s::text[], %s)", (rest, self.worker_id))
                        rows += cur.fetchall()
                return rows
            except psycopg2.Error as e:
                if not unavailable(e):
                    raise
                lost = True
                log("database unavailable during a claim (%s); retrying" % str(e).strip())
                self.db = None
                self.pause(1.0)

    def complete_tx(self, batch):
        """One transaction: complete_many (successes), complete (the others), the
        effect of every recorded success. Returns {run_key: recorded}."""
        ok = [d for d in batch if d.result[0] == "succeeded"]
        other = [d for d in batch if d.result[0] != "succeeded"]
        recorded = {}

        def tx(cur):
            try:
                cur.execute("BEGIN")
                if ok:
                    cur.execute("SELECT run_key, recorded FROM warren.complete_many(%s::text[],"
                                " %s::int[])", ([d.run_key for d in ok],
                                                [d.run[1] for d in ok]))
                    recorded.update(cur.fetchall())
                if other:
                    cur.execute("SELECT t.k, warren.complete(t.k, t.a, t.o, t.e) FROM unnest("
                                "%s::text[], %s::int[], %s::text[], %s::text[]) AS t(k, a, o, e)",
                                ([d.run_key for d in other], [d.run[1] for d in other],
                                 [d.result[0] for d in other], [d.result[1] for d in other]))
                    recorded.update(cur.fetchall())
                effects = [{"run_key": d.run_key, "attempt": d.run[1], "payload": d.run[4]}
                           for d in ok if recorded.get(d.run_key)]
                if effects:
                    cur.execute(pgsql.SQL(
                        "INSERT INTO {} (run_key, attempt, worker, payload)"
                        " SELECT x.run_key, x.attempt, %s, x.payload FROM jsonb_to_recordset(%s)"
                        " AS x(run_key text, attempt int, payload jsonb)"
                        " ON CONFLICT (run_key) DO NOTHING").format(
                            pgsql.Identifier(self.args.table)),
                        (self.worker_id, json.dumps(effects)))
                cur.execute("COMMIT")
            except Exception:
                try:
                    cur.execute("ROLLBACK")
                except psycopg2.Error:
                    pass
                raise
            return recorded

        return self.db_call(tx)

    # -- the broker ---------------------------------------------------------------
    def connect_broker(self):
        pause = 1.0
        while not stopping:
            conn = None
            try:
                params = pika.URLParameters(self.args.amqp_url)
                params.socket_timeout = 5
                params.blocked_connection_timeout = 30
                conn = pika.BlockingConnection(params)
                ch = conn.channel()
                dch = conn.channel()
                dch.confirm_delivery()  # dead-letter copies are confirmed before the ack
                ch.basic_qos(prefetch_count=self.args.prefetch or self.args.concurrency)
                self.gen += 1
                self.conn, self.ch, self.dch = conn, ch, dch
                self.unacked.clear()
                self.held = []
                gen = self.gen
                ch.basic_consume(self.queue, lambda c, m, p, b: self.on_message(gen, m, p, b))
                log("worker %s consuming %s" % (self.worker_id, self.queue))
                return True
            except pika.exceptions.AMQPError as e:
                self.conn = self.ch = self.dch = None
                try:
                    if conn is not None and conn.is_open:
                        conn.close()
                except Exception:
                    pass
                log("cannot consume %s (%r); retrying in %.0f s" % (self.queue, e, pause))
                self.pause(pause)
                pause = min(pause * 2, 10.0)
        return False

    def drop_broker(self):
        """The broker requeues the unacked deliveries of a lost connection: held
        ones are forgotten; running ones go on and are completed, not acked (their
        redelivery finds the run finished, or running as ours, and is acked)."""
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.close()
        except Exception:
            pass
        self.conn = self.ch = self.dch = None
        self.unacked.clear()
        self.held = []

    def on_message(self, gen, method, props, body):
        d = Delivery(method.delivery_tag, gen)
        self.unacked[d.tag] = (d, props, body)
        try:
            msg = json.loads(body)
            if not isinstance(msg, dict):
                raise ValueError("the body is not a JSON object")
            run_key = msg.get("run_key")
            if not isinstance(run_key, str) or not run_key:
                raise ValueError('no "run_key" string in the body')
            if props.message_id and props.message_id != run_key:
                raise ValueError("message_id %s differs from run_key %s"
                                 % (props.message_id, run_key))
        except Exception as e:
            self.dead_letter(d, "malformed message: %s" % e)
            return
        d.run_key = run_key
        due = parse_time((props.headers or {}).get("x-warren-due-at") or msg.get("due_at"))
        d.due = due if due is not None and due - self.db_now() <= HOLD_MAX_S else 0.0
        if stopping:
            self.give_back(d)
            return
        self.held.append(d)

    def dead_letter(self, d, reason):
        """A copy to warren.dead with the reason in x-warren-error (confirmed), then
        the original acked; if that publish fails, rejected without requeue (its
        queue dead-letters it, without the reason). Never a silent drop."""
        log("rejecting %s" % reason)
        _, props, body = self.unacked.get(d.tag, (d, None, b""))
        headers = dict(props.headers or {}) if props is not None else {}
        headers.update({"x-warren-error": reason[:1000],
                        "x-warren-dead-lettered-by": self.worker_id,
                        "x-warren-source-queue": self.queue})
        try:
            self.dch.basic_publish("warren.dead", self.args.queue, body, pika.BasicProperties(
                delivery_mode=2, headers=headers, message_id=props.message_id if props else None,
                content_type=props.content_type if props else None))
            self.settle([d])
        except Exception as e:
            log("dead-letter copy failed (%r): rejecting" % e)
            if d.gen == self.gen and self.unacked.pop(d.tag, None) is not None:
                self.ch.basic_reject(d.tag, requeue=False)

    def give_back(self, d):
        if d.gen == self.gen and self.unacked.pop(d.tag, None) is not None:
            self.ch.basic_nack(d.tag, requeue=True)

    def settle(self, batch):
        """Acknowledges settled deliveries (only after their completion committed):
        one basic.ack with multiple for those at the head of the delivery order,
        one by one for those behind a delivery still open."""
        for d in batch:
            d.settled = True
        if self.ch is None:
            return
        last = None
        while self.unacked:
            tag, (d, _, _) = next(iter(self.unacked.items()))
            if not d.settled:
                break
            last = tag
            self.unacked.popitem(last=False)
        if last is not None:
            self.ch.basic_ack(last, multiple=True)
        for d in batch:
            if d.gen == self.gen and self.unacked.pop(d.tag, None) is not None:
                self.ch.basic_ack(d.tag)

    # -- the loop -----------------------------------------------------------------
    def handle(self, d):
        """The work, on a handler thread. Returns (outcome, error); polls d.stop."""
        attempt = d.run[1]
        if attempt <= self.args.fail_first:
            return "retry", "failing attempt %d on purpose (--fail-first)" % attempt
        end = time.monotonic() + self.args.work_seconds
        while time.monotonic() < end:
            if d.stop.wait(min(0.1, max(0.0, end - time.monotonic()))):
                return "retry", "stopped"
        return "succeeded", None

    def run_handler(self, d, conn):
        try:
            r = self.handle(d)
        except Exception as e:
            r = ("retry", "handler raised %r" % e)
        self.results.put((d, r))
        try:
            conn.add_callback_threadsafe(lambda: None)  # wakes the loop now
        except Exception:
            pass

    def claim_due(self):
        if not self.held:
            return
        now = self.db_now()
        free = self.args.concurrency - len(self.running) - len(self.finished)
        due, keep = [], []
        for d in self.held:
            (due if d.due - CLAIM_AHEAD_S <= now and len(due) < free else keep).append(d)
        if not due:
            return
        self.held = keep
        due.sort(key=lambda d: d.run_key.encode())  # sorted: one lock order for every batch
        try:
            rows = self.claim([d.run_key for d in due])
        except psycopg2.Error as e:  # refused (e.g. 22023): give them back after a pause
            log("claim_many refused (%s); giving %d deliveries back" % (str(e).strip(), len(due)))
            self.pause(1.0)
            for d in due:
                self.give_back(d)
            return
        by_key = {r[0]: r for r in rows}
        unclaimed = []
        for d in due:
            r = by_key.get(d.run_key)
            if r is None:
                unclaimed.append(d)
                continue
            d.run = r
            d.lease = float(r[5])
            d.margin = min(5.0, d.lease / 3.0)
            d.last_ok = time.monotonic()
            d.next_hb = d.last_ok + d.lease / 3.0
            self.running.add(d)
            self.pool.submit(self.run_handler, d, self.conn)
        if unclaimed:
            self.decide_unclaimed(unclaimed)

    def decide_unclaimed(self, batch):
        """The claim gave no row: the database decides (warren.run_states). Due later:
        hold again; unknown (or a queue this login is not granted): dead letter;
        anything else (finished, leased elsewhere, held back by its overlap policy, a
        stale copy): a duplicate, acked, the database has the run."""
        def states(cur):
            cur.execute("SELECT run_key, state, extract(epoch FROM due_at)::float8,"
                        " extract(epoch FROM db_now)::float8"
                        " FROM warren.run_states(%s::text[])", ([d.run_key for d in batch],))
            return {r[0]: r for r in cur.fetchall()}
        try:
            st = self.db_call(states)
        except psycopg2.Error as e:
            log("run_states refused (%s); acking %d unclaimed deliveries" % (
                str(e).strip(), len(batch)))
            self.settle(batch)
            return
        dup = []
        for d in batch:
            s = st.get(d.run_key)
            if s is None:
                self.dead_letter(d, "no run %s in the database that worker %s may see (unknown"
                                 " run, or its queue is not granted to this login: warren grant)"
                                 % (d.run_key, self.worker_id))
            elif (s[1] in ("planned", "published", "retrying") and 0 < s[2] - s[3] <= HOLD_MAX_S
                  and d.reholds < MAX_REHOLDS and d.gen == self.gen and not stopping):
                d.reholds += 1
                d.due = self.db_now() + (s[2] - s[3])
                self.held.append(d)
            else:
                dup.append(d)
        if dup:
            self.settle(dup)

    def collect(self):
        while True:
            try:
                d, r = self.results.get_nowait()
            except queue.Empty:
                return
            self.running.discard(d)
            d.result = r
            if d.stop.is_set():  # lease lost: not ours any more, no completion
                log("%s attempt %d: lease lost, not completed" % (d.run_key, d.run[1]))
                self.settle([d])
            else:
                self.finished.append(d)

    def complete_finished(self):
        if not self.finished:
            return
        batch, self.finished = sorted(self.finished, key=lambda d: d.run_key.encode()), []
        try:
            recorded = self.complete_tx(batch)
        except psycopg2.Error as e:  # a real SQL error: one by one, so one run cannot hold others
            log("completing %d runs together failed (%s); one by one" % (len(batch), str(e).strip()))
            recorded = {}
            for d in list(batch):
                try:
                    recorded.update(self.complete_tx([d]))
                except psycopg2.Error as e1:  # left unacked: the reaper retries it
                    log("%s attempt %d: cannot complete (%s)" % (d.run_key, d.run[1], e1))
                    batch.remove(d)
        for d in batch:
            ok = recorded.get(d.run_key)
            if not ok or d.result[0] != "succeeded" or self.args.work_seconds >= 1:
                log("%s attempt %d: %s%s" % (d.run_key, d.run[1], d.result[0],
                                             "" if ok else " (stale: not recorded)"))
        self.settle(batch)  # only after the commit
        self.done += len(batch)
        if self.args.max_runs and self.done >= self.args.max_runs:
            global stopping
            stopping = True

    def check_deadlines(self):
        now = time.monotonic()
        for d in self.running:
            if not d.stop.is_set() and now - d.last_ok > d.lease - d.margin:
                log("%s attempt %d: no heartbeat for too long, stopping" % (d.run_key, d.run[1]))
                d.stop.set()

    def heartbeat(self):
        self.check_deadlines()
        now = time.monotonic()
        due = [d for d in self.running if not d.stop.is_set() and now >= d.next_hb]
        if not due:
            return
        for d in due:
            d.next_hb = now + d.lease / 3.0
        try:
            with self.db.cursor() as cur:
                cur.execute("SELECT t.i, warren.heartbeat(t.k, t.a) FROM unnest(%s::text[],"
                            " %s::int[]) WITH ORDINALITY AS t(k, a, i)",
                            ([d.run_key for d in due], [d.run[1] for d in due]))
                rows = cur.fetchall()
        except (psycopg2.Error, AttributeError) as e:  # the deadline above still holds
            log("heartbeat failed: %s" % str(e).strip())
            if unavailable(e) or isinstance(e, AttributeError):
                self.db = None
            return
        t = time.monotonic()
        for i, held in rows:
            d = due[i - 1]
            if held:
                d.last_ok = t
            elif not d.stop.is_set():
                log("%s attempt %d: heartbeat refused, stopping" % (d.run_key, d.run[1]))
                d.stop.set()

    def turn(self):
        if time.monotonic() - self.clock_at >= CLOCK_EVERY_S:
            try:
                self.db_call(self.read_clock)
            except psycopg2.Error as e:
                log("reading the database's clock: %s" % e)
        self.collect()
        self.complete_finished()
        if not stopping:
            self.claim_due()
        self.heartbeat()

    def wait_time(self):
        t = 0.1  # heartbeats and deadlines
        if self.held and len(self.running) + len(self.finished) < self.args.concurrency:
            t = min(t, max(0.0, min(d.due for d in self.held) - CLAIM_AHEAD_S - self.db_now()))
        return t

    def run(self):
        if not self.connect_broker():
            return
        gave_back = False
        while True:
            try:
                if self.conn is None:
                    if stopping or not self.connect_broker():
                        if not (self.running or self.finished):
                            break
                        self.pause(0.1)
                        self.collect()
                        self.complete_finished()
                        continue
                if stopping and not gave_back:
                    # stop consuming; what was not started goes back at once
                    self.ch.stop_consuming()
                    for d in self.held:
                        self.give_back(d)
                    self.held = []
                    gave_back = True
                if stopping and not (self.running or self.finished) and self.results.empty():
                    break
                self.conn.process_data_events(time_limit=self.wait_time())
                # Deliveries that came in the same read as the first make one batch with it.
                self.conn.process_data_events(time_limit=0)
                self.turn()
            except pika.exceptions.AMQPError as e:
                log("broker connection lost (%r); reconnecting" % e)
                self.drop_broker()
                gave_back = False
        self.pool.shutdown(wait=True)
        self.collect()
        self.complete_finished()
        self.drop_broker()
        log("stopped after %d run(s)" % self.done)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", required=True, help="job queue (consumes warren.ready.QUEUE)")
    ap.add_argument("--database-url", default=os.environ.get("WARREN_DATABASE_URL"))
    ap.add_argument("--amqp-url", default=os.environ.get("WARREN_AMQP_URL"))
    ap.add_argument("--worker-id")
    ap.add_argument("--table", default="warren_example_effects")
    ap.add_argument("--concurrency", type=int, default=4,
                    help="handler threads (default 4), and the prefetch unless --prefetch")
    ap.add_argument("--prefetch", type=int, default=0,
                    help="deliveries held at once (default: --concurrency)")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--work-seconds", type=float, default=0.1)
    ap.add_argument("--max-runs", type=int, default=0)
    args = ap.parse_args()
    if not args.database_url or not args.amqp_url:
        ap.error("set --database-url/--amqp-url or WARREN_DATABASE_URL/WARREN_AMQP_URL")
    if not 1 <= args.concurrency <= 4096:
        ap.error("--concurrency: between 1 and 4096, not %d" % args.concurrency)
    if not 0 <= args.prefetch <= 65535:
        ap.error("--prefetch: between 1 and 65535 (0: --concurrency), not %d" % args.prefetch)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", args.table):
        ap.error("--table %s: want a plain SQL identifier" % args.table)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    Worker(args).run()


if __name__ == "__main__":
    main()
