#!/usr/bin/env python3
"""oracle.py: an independent, brute-force model of warren's cron rules in
Python (zoneinfo for the zones), used to derive and re-check the expected
instants in valid.txt. It walks local wall-clock times one by one and applies
the DST contract of docs/cron.md; it shares no code with src/cron.c.

    tests/data/cron/oracle.py cases.txt > valid.txt   # cases: expr<TAB>zone<TAB>from<TAB>count[<TAB>job]
    tests/data/cron/oracle.py --check valid.txt        # recompute and compare

Run it over the suite's pinned tz release, as the C tests are:
PYTHONTZPATH=build-ci/tzdata-2026f (tests/CMakeLists.txt compiles it).
"""
import calendar
import datetime as dt
import sys
from zoneinfo import ZoneInfo

UTC = dt.timezone.utc
MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DOWS = "SUN MON TUE WED THU FRI SAT".split()
RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}


def fnv(name, kind):
    h = 2166136261
    for b in name.encode() + bytes([kind]):
        h ^= b
        h = (h * 16777619) & 0xFFFFFFFF
    return h


def val(tok, kind):
    if tok.isdigit():
        return int(tok)
    names = MONTHS if kind == 4 else DOWS
    return names.index(tok.upper()) + (1 if kind == 4 else 0)


class Field:
    def __init__(self, text, kind, job):
        lo, hi = RANGES[kind]
        self.text, self.vals, self.last, self.w, self.nl, self.nth = text, set(), False, set(), set(), set()
        for item in text.split(","):
            step = None
            if "/" in item:
                item, s = item.split("/")
                step = int(s)
            u = item.upper()
            if u in ("*", "?"):
                a, b = lo, hi
            elif u.startswith("H"):
                a, b = lo, {3: 28, 5: 6}.get(kind, hi)
                if u.startswith("H("):
                    a, b = (val(x, kind) for x in item[2:-1].split("-"))
                h = fnv(job, kind)
                if step is None:
                    v = a + h % (b - a + 1)
                    a = b = v
                else:
                    a = a + h % min(step, b - a + 1)
            elif kind == 3 and u == "L":
                self.last = True
                continue
            elif kind == 3 and u.endswith("W"):
                self.w.add(int(u[:-1]))
                continue
            elif kind == 5 and u.endswith("L"):
                self.nl.add(val(item[:-1], kind) % 7)
                continue
            elif kind == 5 and "#" in u:
                n, k = item.split("#")
                self.nth.add((val(n, kind) % 7, int(k)))
                continue
            elif "-" in item:
                a, b = (val(x, kind) for x in item.split("-"))
            else:
                a = val(item, kind)
                b = hi if step is not None else a
            for v in range(a, b + 1, step or 1):
                self.vals.add(0 if kind == 5 and v == 7 else v)


class Cron:
    def __init__(self, expr, job=""):
        expr = MACROS.get(expr.strip(), expr)
        f = expr.split()
        if len(f) == 5:
            f = ["0"] + f
        self.f = [Field(t, k, job) for k, t in enumerate(f)]
        self.interval = self.f[2].text[0] in "*?"
        self.day_or = self.f[3].text[0] not in "*?" and self.f[5].text[0] not in "*?"

    def day_ok(self, d):
        dom, dow = self.f[3], self.f[5]
        dim = calendar.monthrange(d.year, d.month)[1]
        wd = (d.weekday() + 1) % 7  # 0 = Sunday
        a = d.day in dom.vals or (dom.last and d.day == dim)
        for n in dom.w:
            if n > dim:
                continue
            t = dt.date(d.year, d.month, n)
            twd = (t.weekday() + 1) % 7
            m = n
            if twd == 6:
                m = 3 if n == 1 else n - 1
            elif twd == 0:
                m = n - 2 if n == dim else n + 1
            a = a or m == d.day
        b = wd in dow.vals or (wd in dow.nl and d.day + 7 > dim)
        b = b or (wd, (d.day - 1) // 7 + 1) in dow.nth
        if not (d.month in self.f[4].vals):
            return False
        return (a or b) if self.day_or else (a and b)

    def times(self):
        for h in sorted(self.f[2].vals):
            for m in sorted(self.f[1].vals):
                for s in sorted(self.f[0].vals):
                    yield h, m, s


def to_utc(naive, zone, fold):
    return naive.replace(tzinfo=zone, fold=fold).astimezone(UTC)


def exists(naive, zone, fold):
    u = to_utc(naive, zone, fold)
    return u.astimezone(zone).replace(tzinfo=None) == naive


def transition_in(naive, zone):
    """The UTC instant of the transition that skips the wall time naive."""
    lo = to_utc(naive, zone, 1)  # before the transition
    hi = to_utc(naive, zone, 0)  # after it
    lo, hi = int(lo.timestamp()), int(hi.timestamp())
    off = lambda t: dt.datetime.fromtimestamp(t, UTC).astimezone(zone).utcoffset()
    o_lo = off(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if off(mid) == o_lo:
            lo = mid
        else:
            hi = mid
    return hi


def fires(cron, zone, naive):
    """UTC instants (epoch seconds) at which local wall time naive fires."""
    e0, e1 = exists(naive, zone, 0), exists(naive, zone, 1)
    u0, u1 = int(to_utc(naive, zone, 0).timestamp()), int(to_utc(naive, zone, 1).timestamp())
    if e0 and e1 and u0 != u1:  # overlap: fold=0 is the earlier instant
        return [min(u0, u1), max(u0, u1)] if cron.interval else [min(u0, u1)]
    if e0 or e1:
        return [u0 if e0 else u1]
    return [] if cron.interval else [transition_in(naive, zone)]


def next_n(expr, zone_name, frm, count, job=""):
    cron = Cron(expr, job)
    zone = ZoneInfo(zone_name)
    start = dt.datetime.fromisoformat(frm.replace("Z", "+00:00"))
    start_s = start.timestamp()
    day = (start.astimezone(zone) - dt.timedelta(days=2)).date()
    out = set()
    while day.year < 10000:
        if cron.day_ok(day):
            for h, m, s in cron.times():
                for u in fires(cron, zone, dt.datetime(day.year, day.month, day.day, h, m, s)):
                    if u > start_s:
                        out.add(u)
        if len(out) >= count:
            lst = sorted(out)
            # wall times two days later cannot fire before the count-th instant
            lim = dt.datetime.fromtimestamp(lst[count - 1], UTC).astimezone(zone).date()
            if day > lim + dt.timedelta(days=2):
                return lst[:count]
        day += dt.timedelta(days=1)
    return sorted(out)[:count]


def fmt(u):
    return dt.datetime.fromtimestamp(u, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    check = sys.argv[1] == "--check"
    bad = 0
    for line in open(sys.argv[-1]):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            if not check:
                print(line)
            continue
        cols = line.split("\t")
        expr, zone, frm = cols[0], cols[1], cols[2]
        if check:
            want = cols[3].split()
            job = cols[4] if len(cols) > 4 else ""
            got = [fmt(u) for u in next_n(expr, zone, frm, len(want), job)]
            if got != want:
                bad += 1
                print("MISMATCH", line, "oracle:", " ".join(got))
        else:
            count = int(cols[3])
            job = cols[4] if len(cols) > 4 else ""
            got = " ".join(fmt(u) for u in next_n(expr, zone, frm, count, job))
            print("\t".join([expr, zone, frm, got] + ([job] if job else [])))
    if check:
        print("mismatches:", bad)
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
