#!/usr/bin/env python3
"""crosscheck.py: random expressions x zones x start instants, `warren cron next`
against oracle.py (Python zoneinfo, brute force). Not a ctest (Python-side
speed); run by hand after changing cron.c or tz.c:
    WARREN_BIN=build/warren tests/data/cron/crosscheck.py [SEED] [CASES]
"""
import os, random, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle
BIN = os.environ.get("WARREN_BIN", "build/warren")
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
secs = ["0", "0", "30", "*/20"]
mins = ["*", "*/7", "0", "5,35", "10-20/5", "H", "59", "30", "*/15", "0-5"]
hours = ["*", "*/3", "2", "1-3", "0,12", "23", "H(1-3)", "*/2", "0", "2-3", "1", "3"]
doms = ["*", "*", "*", "1-15", "L", "15W", "?", "*/2", "1W", "29", "31"]
mons = ["*", "*", "*", "*/2", "3,10", "MAR-NOV", "FEB", "OCT-DEC"]
dows = ["*", "*", "*", "MON-FRI", "0", "5L", "1#2", "SAT,SUN", "?", "7#5"]
zones = ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "America/Havana",
         "Europe/Dublin", "Asia/Kathmandu", "Pacific/Chatham", "Pacific/Apia", "America/Sao_Paulo", "UTC",
         "Asia/Tehran", "Europe/London", "America/St_Johns", "Antarctica/Troll", "America/Nuuk",
         "Asia/Jerusalem", "Africa/Casablanca", "Europe/Chisinau", "America/Asuncion", "Australia/Adelaide"]
bad = n = 0
for it in range(int(sys.argv[2]) if len(sys.argv) > 2 else 200):
    f = [random.choice(mins), random.choice(hours), random.choice(doms), random.choice(mons), random.choice(dows)]
    if random.random() < 0.2:
        f.insert(0, random.choice(secs))
    expr = " ".join(f)
    zone = random.choice(zones)
    year = random.choice([random.randint(1975, 2100), random.randint(2024, 2060)])
    frm = "%04d-%02d-%02dT%02d:%02d:%02dZ" % (year, random.randint(1, 12), random.randint(1, 28), random.randint(0, 23), random.randint(0, 59), random.randint(0, 59))
    if zone == "Pacific/Apia" and random.random() < 0.5:
        frm = "2011-12-29T%02d:00:00Z" % random.randint(0, 23)
    r = subprocess.run([BIN, "cron", "next", "--tz", zone, "--from", frm, "--count", "6", "--job", "jobx", expr], capture_output=True, text=True)
    if r.returncode != 0:
        if "never fire" in r.stderr:
            continue
        print("ERR", expr, zone, frm, r.stderr); bad += 1; continue
    got = r.stdout.split()
    want = [oracle.fmt(u) for u in oracle.next_n(expr, zone, frm, 6, "jobx")]
    n += 1
    if got != want:
        bad += 1
        print("DIFF", repr(expr), zone, frm, "\n  c :", got, "\n  py:", want)
print("compared", n, "bad", bad)
sys.exit(1 if bad else 0)
