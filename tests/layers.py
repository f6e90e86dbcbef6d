#!/usr/bin/env python3
"""layers.py: no cycle between the files of src/ (docs/design.md §6.2).

    python3 tests/layers.py build/libwarren.a

Reads the static library's symbol table (nm): which object file defines each
external function, and which ones each object file uses. A file that calls a
function of another file that calls back into it (directly or through
others) is a cycle: each is printed with the symbols that close it, and the
exit status is 1. The C worker's files must also respect their layer order
(LAYERS below, bottom first): a file may call only files of lower layers.
Functions a file keeps to itself (static) are not seen, and need not be.
"""
import collections
import subprocess
import sys

# The C worker's layers, bottom first (docs/design.md §6.2). Files of one
# layer may not call each other either.
LAYERS = [
    ["worker_exec.c", "worker_pool.c"],
    ["worker_sql.c"],
    ["worker_handler.c", "worker_pend.c"],
    ["worker_conn.c"],
    ["worker_slot.c"],
    ["worker_intake.c", "worker_claim.c", "worker_settle.c"],
    ["worker.c"],
]


def symbols(lib):
    out = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
    defs, uses = {}, collections.defaultdict(set)
    for line in out.splitlines():
        # "lib.a:obj.c.o:<address> T name" (nm -A)
        lib_obj, sep, rest = line.partition(".o:")
        if not sep:
            continue
        obj = lib_obj.rsplit(":", 1)[-1] + ".o"
        name = obj[:-2] if obj.endswith(".o") else obj  # foo.c.o -> foo.c
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDBRV":
            defs[parts[2]] = name
        elif len(parts) == 2 and parts[0] == "U":
            uses[name].add(parts[1])
    return defs, uses


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: layers.py LIBRARY.a")
    defs, used = symbols(sys.argv[1])
    edges = collections.defaultdict(lambda: collections.defaultdict(set))
    files = set(defs.values()) | set(used)
    for f in files:
        for s in used[f]:
            g = defs.get(s)
            if g is not None and g != f:
                edges[f][g].add(s)
    if len(files) < 10 or not edges:
        sys.exit(f"layers.py: {sys.argv[1]}: only {len(files)} object files; not the library?")
    bad = 0
    # strongly connected components (Tarjan): any with two or more files is a cycle
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(files):
        if v not in index:
            visit(v)
    for comp in comps:
        bad = 1
        print("cycle between " + ", ".join(comp) + ":")
        for a in comp:
            for b in comp:
                if b in edges[a]:
                    print(f"  {a} calls {b}: {', '.join(sorted(edges[a][b])[:5])}")
    layer = {f: i for i, group in enumerate(LAYERS) for f in group}
    for f in sorted(files):
        if f not in layer:
            if f.startswith("worker"):
                bad = 1
                print(f"{f}: a worker file not in LAYERS (tests/layers.py): give it its layer")
            continue
        for g, syms in sorted(edges[f].items()):
            if g in layer and layer[g] >= layer[f]:
                bad = 1
                print(f"{f} (layer {layer[f] + 1}) calls {g} (layer {layer[g] + 1}), "
                      f"not below it: {', '.join(sorted(syms)[:5])}")
    nedges = sum(len(v) for v in edges.values())
    print(f"layers.py: {len(files)} files, {nedges} file-to-file calls, "
          f"{'no cycle' if not comps else str(len(comps)) + ' cycle(s)'}")
    sys.exit(bad)


if __name__ == "__main__":
    main()
