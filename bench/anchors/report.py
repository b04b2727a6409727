#!/usr/bin/python3
"""report.py -- summary.md and busbw*.png of a bench/compare results dir.

    bench/anchors/report.py bench/results/2026-11-02

Reads what bench/compare left in the directory (meta.json, all.csv,
limits.csv) and writes:
  summary.md        header (command, date, CPU, versions, limits), an
                    overview per rank count and collective, then one table
                    per rank count and collective: size | xcoll | best
                    anchor | xcoll/best | each anchor | xcoll % of memcpy
  busbw.png         busbw against size, a panel per (rank count,
                    collective), every library, the memcpy limit dashed
  busbw-n<N>.png    the same, one file per rank count
It can be rerun on an old directory; it changes nothing else.

Conventions.
  - Per (library, ranks, collective, size) the row with the lowest median
    time over the rounds is kept ("best median").
  - Ratio = speed of xcoll / speed of the anchor = anchor time / xcoll
    time (= busbw ratio, since the sizes are equal): > 1 means xcoll is
    faster.
  - Up to SMALL bytes a cell shows the time (latency matters there), above
    it busbw in GB/s.
  - "% of memcpy" = xcoll busbw / single-thread memcpy of a buffer of the
    same size (limits.c measures one at every size of the sweep; the best
    of the runs at the start and the end).
"""

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

SMALL = 4096
LARGE = 1 << 20
LIB_NAMES = {"xcoll": "xcoll", "ompi": "Open MPI", "mpich": "MPICH",
             "gloo": "Gloo"}
LIB_COLORS = {"xcoll": "#d62728", "ompi": "#1f77b4", "mpich": "#2ca02c",
              "gloo": "#ff7f0e"}
ANCHORS = ["ompi", "mpich", "gloo"]


def fmt_size(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def fmt_num(x):
    s = f"{x:.3g}"
    return f"{x:.2e}" if "e" in s else s


def fmt_ratio(r):
    if r is None:
        return "–"
    s = f"{r:.2f}"
    return f"**{s}**" if r >= 1.0 else s


def geomean(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None


def load(out):
    meta = json.loads((out / "meta.json").read_text())
    best, wrong, best_mean = {}, set(), {}
    with open(out / "all.csv") as f:
        for r in csv.DictReader(f):
            key = (r["lib"], int(r["nranks"]), r["collective"], int(r["size"]))
            r["time_us"] = float(r["time_us"])
            r["busbw_gbs"] = float(r["busbw_gbs"])
            r["mean_us"] = float(r.get("mean_us") or 0)  # older records: none
            if int(r["wrong"]) > 0:
                wrong.add(key)
            if r["time_us"] > 0 and (key not in best or
                                     r["time_us"] < best[key]["time_us"]):
                best[key] = r
            if r["mean_us"] > 0:
                best_mean[key] = min(r["mean_us"],
                                     best_mean.get(key, r["mean_us"]))
    # Each metric's best round: the row kept is the best median's, its
    # mean_us the best mean of any round (they need not be one round's).
    for key, m in best_mean.items():
        if key in best:
            best[key] = dict(best[key], mean_us=m)
    limits = []
    if (out / "limits.csv").exists():
        with open(out / "limits.csv") as f:
            limits = list(csv.DictReader(f))
    return meta, best, wrong, limits


class Limit:
    """A per-size limit in GB/s -- by default single-thread memcpy; with
    tests=("xcopy_sweep",) the cross-core copy -- the best measurement at
    that size, else at the nearest measured size (by ratio)."""

    def __init__(self, limits, tests=("memcpy", "memcpy_sweep"), threads="1"):
        self.by_size = {}
        for r in limits:
            if r["test"] in tests and r["threads"] == threads:
                b, v = int(r["bytes"]), float(r["best_gbs"])
                self.by_size[b] = max(v, self.by_size.get(b, 0.0))

    def __bool__(self):
        return bool(self.by_size)

    def at(self, size):
        if not self.by_size:
            return None
        b = min(self.by_size, key=lambda k: abs(math.log(k / size)))
        return self.by_size[b]

    def pct(self, busbw, size):
        v = self.at(size)
        return 100.0 * busbw / v if v else None


def cell(row, size, flag):
    if row is None:
        return "–"
    s = f"{fmt_num(row['time_us'])} µs" if size <= SMALL else \
        fmt_num(row["busbw_gbs"])
    return s + (" ⚠wrong" if flag else "")


def panel_rows(best, libs, n, coll):
    sizes = sorted({k[3] for k in best if k[1] == n and k[2] == coll})
    out = []
    for size in sizes:
        got = {l: best.get((l, n, coll, size)) for l in libs}
        x = got.get("xcoll")
        anchors = [(l, got[l]) for l in ANCHORS if got.get(l)]
        b = min(anchors, key=lambda a: a[1]["time_us"]) if anchors else None
        ratio = b[1]["time_us"] / x["time_us"] if x and b else None
        each = {l: (got[l]["time_us"] / x["time_us"]
                    if x and got.get(l) else None) for l in ANCHORS}
        out.append((size, got, b, ratio, each))
    return out


def mean_load(meta):
    v = [r["load1"] for r in meta["runs"] if "load1" in r]
    return f"{sum(v) / len(v):.1f}" if v else "?"


def header(meta, limits, lim):
    f = meta["facts"]
    v = f.get("versions", {})
    st = meta["settings"]
    L = ["# xcoll vs Open MPI, MPICH and Gloo", "",
         f"- command: `{meta['command']}`",
         f"- date: {meta['date']} ({meta['duration_s']} s)",
         f"- CPU: {f['cpu']}, {f['cores']} cores; kernel {f['kernel']}; "
         f"load average {meta['loadavg_start'][0]:.1f} at the start, "
         f"{meta['loadavg_end'][0]:.1f} at the end, {mean_load(meta)} on "
         "average after each run (other processes share these cores)",
         f"- xcoll {v.get('xcoll', '?')}; Open MPI: "
         f"{v.get('ompi', 'not run')}; MPICH: {v.get('mpich', 'not run')}; "
         f"Gloo: {v.get('gloo', 'not run')}; {v.get('compiler', '')}",
         f"- sizes {st['minbytes']} .. {st['maxbytes']} (x{st['factor']}), "
         f"{st['iters']} timed + {st['warmup']} warm-up iterations, "
         f"{st['rounds']} interleaved rounds (best median and best mean kept), ranks "
         f"{' '.join(map(str, st['ranks']))} on {f['cores']} cores, fp32 sum",
         "- buffers: " + ("every library's on 2 MiB transparent huge pages "
                          "(xcoll: `xc_mem_alloc`; anchors: `--huge`, mapped "
                          "alike)" if st.get("buffers") == "huge" else
                          "xcoll's from `xc_mem_alloc_shared` (node peers map "
                          "them: single copy as memcpy), the anchors' on 2 MiB "
                          "transparent huge pages (`--huge`)"
                          if st.get("buffers") == "shared" else
                          "page-aligned (`posix_memalign`, ordinary 4 KiB pages)")
         + (f"; every receive buffer {st['offset']} bytes past a page boundary "
            "(`--offset`)" if st.get("offset") else ""),
         "- inputs: " + ("fresh: every rank rewrites its input before each "
                         "call (`--fresh`), as a training step leaves it"
                         if st.get("fresh") else
                         "one unchanged send buffer, as nccl-tests"),
         "- launch: " + "; ".join(f"{LIB_NAMES[k]}: `{c}`"
                                  for k, c in meta["launch"].items()
                                  if k in st["libs"]),
         "- placement: " + meta["launch"].get("bind", "unbound (older run)")]
    for l, why in meta.get("skipped_libs", {}).items():
        L.append(f"- **{LIB_NAMES[l]} skipped**: {why}")
    if "gloo" in st["libs"]:
        L.append("- Gloo: reducescatter is `ReduceScatterHalvingDoubling` "
                 "(in place, the only one Debian's Gloo has); sendrecv is "
                 "UnboundBuffer send/recv; allreduce is `gloo::allreduce` "
                 "(ring)")
    L += ["", "How to read: ratio = xcoll speed / anchor speed (anchor time "
          "/ xcoll time); **bold** = xcoll at least as fast. Cells up to "
          f"{fmt_size(SMALL)} are median times (µs), above busbw (GB/s, "
          "nccl-tests' bus bandwidth). See docs/benchmarking.md.", ""]
    if limits:
        L += ["Machine limits (GB/s of one buffer's bytes per second; best "
              "and median of repeated runs, at the start and the end):", "",
              "| when | test | size | threads | best | median |",
              "|---|---|---|---|---|---|"]
        for r in limits:
            if not r["test"].endswith(("_sweep", "_us")):
                L.append(f"| {r['when']} | {r['test']} | "
                         f"{fmt_size(int(r['bytes']))} | {r['threads']} | "
                         f"{r['best_gbs']} | {r['median_gbs']} |")
        L += ["", "\"% of memcpy\" divides xcoll's busbw by the best "
              "single-thread memcpy of a buffer of the same size, measured "
              "at every size of the sweep at the start and the end "
              "(limits.csv), best of both, GB/s: " +
              ", ".join(f"{fmt_size(b)} {fmt_num(v)}"
                        for b, v in sorted(lim.by_size.items())) + ".", ""]
        xc = Limit(limits, ("xcopy_sweep",), "2")
        if xc:
            L += ["\"% of x-copy\" divides it by a cross-core copy of a "
                  "buffer of the same size instead: a thread on CPU 0 writes "
                  "it, a thread on CPU 1 copies it into its own -- what "
                  "moving a just-written message from one core to another "
                  "costs when one core copies (the floor of a 2-rank "
                  "send/recv; cooperative copies can pass it), best of "
                  "start and end, GB/s: " +
                  ", ".join(f"{fmt_size(b)} {fmt_num(v)}"
                            for b, v in sorted(xc.by_size.items())
                            if b > SMALL) + ".", ""]
        lat = [r for r in limits if r["test"].endswith("_us")]
        if lat:
            name = {"line_us": "cache-line flag, one way",
                    "futex_us": "futex wake"}
            L += ["Cross-core latencies (µs, best / median; two threads on "
                  "CPUs 0 and 1): " +
                  "; ".join(f"{r['when']} {name.get(r['test'], r['test'])} "
                            f"{r['best_gbs']} / {r['median_gbs']}"
                            for r in lat) +
                  ". The flag's time is the floor of every small "
                  "shared-memory call; on a VM it changes when the "
                  "hypervisor moves the vCPUs (docs/benchmarking.md).", ""]
    return L


def mean_ratio(got):
    """Best anchor's mean time per iteration / xcoll's (None without)."""
    x = got.get("xcoll")
    means = [got[a]["mean_us"] for a in ANCHORS
             if got.get(a) and got[a]["mean_us"] > 0]
    if not x or x["mean_us"] <= 0 or not means:
        return None
    return min(means) / x["mean_us"]


def overview(best, libs, meta, lim):
    st = meta["settings"]
    anchors = [a for a in ANCHORS if a in libs]
    L = ["## Overview", "",
         "Geometric means of xcoll/anchor over sizes; peaks are the largest "
         "busbw over sizes. \"≤4 KiB, mean\" divides mean times per "
         "iteration (each run's slowest rank) instead of medians: a "
         "throughput, which with more ranks than cores can differ from the "
         "median of per-iteration maxima by 2x either way (ranks run in "
         "bursts; docs/benchmarking.md).", "",
         "| ranks | collective | xcoll/best ≤4 KiB | ≤4 KiB, mean | "
         "xcoll/best ≥1 MiB | " +
         " | ".join(f"xcoll/{LIB_NAMES[a]}" for a in anchors) +
         " | xcoll peak busbw | best anchor peak | xcoll peak % memcpy |",
         "|---|---|---|---|---|" + "---|" * len(anchors) + "---|---|---|"]
    for n in st["ranks"]:
        for coll in st["colls"]:
            rows = panel_rows(best, libs, n, coll)
            if not rows:
                continue
            small = geomean([r[3] for r in rows if r[0] <= SMALL])
            small_mean = geomean([mean_ratio(r[1]) for r in rows
                                  if r[0] <= SMALL])
            large = geomean([r[3] for r in rows if r[0] >= LARGE])
            each = [geomean([r[4][a] for r in rows]) for a in anchors]
            xs = [r[1]["xcoll"] for r in rows if r[1].get("xcoll")]
            xpk = max(xs, key=lambda r: r["busbw_gbs"]) if xs else None
            apk = None
            for a in anchors:
                for r in rows:
                    if r[1].get(a) and (apk is None or r[1][a]["busbw_gbs"] >
                                        apk[1]["busbw_gbs"]):
                        apk = (a, r[1][a])
            p = lim.pct(xpk["busbw_gbs"], int(xpk["size"])) if xpk else None
            pct = f"{p:.0f}%" if p is not None else "–"
            L.append(
                f"| {n} | {coll} | {fmt_ratio(small)} | "
                f"{fmt_ratio(small_mean)} | {fmt_ratio(large)} | "
                + " | ".join(fmt_ratio(e) for e in each) + " | " +
                (f"{fmt_num(xpk['busbw_gbs'])} GB/s @ "
                 f"{fmt_size(int(xpk['size']))}" if xpk else "–") + " | " +
                (f"{fmt_num(apk[1]['busbw_gbs'])} GB/s ({LIB_NAMES[apk[0]]})"
                 if apk else "–") + f" | {pct} |")
    return L + [""]


def tables(best, wrong, libs, meta, lim, xc):
    st = meta["settings"]
    anchors = [a for a in ANCHORS if a in libs]
    xcol = bool(xc)
    L = []
    for n in st["ranks"]:
        L += [f"## {n} ranks", ""]
        for coll in st["colls"]:
            rows = panel_rows(best, libs, n, coll)
            L += [f"### {coll}, {n} ranks", ""]
            if not rows:
                L += ["no results (see failures)", ""]
                continue
            algos = sorted({best[k]["algo"] for k in best
                            if k[0] == "xcoll" and k[1] == n and k[2] == coll})
            if algos:
                L += [f"xcoll algorithms: {', '.join(algos)}", ""]
            L += ["| size | xcoll | best anchor | xcoll/best | " +
                  " | ".join(LIB_NAMES[a] for a in anchors) +
                  " | xcoll % of memcpy |" +
                  (" % of x-copy |" if xcol else ""),
                  "|---:|---:|---|---:|" + "---:|" * len(anchors) + "---:|" +
                  ("---:|" if xcol else "")]
            for size, got, b, ratio, _ in rows:
                x = got.get("xcoll")
                p = lim.pct(x["busbw_gbs"], size) if x else None
                pct = f"{p:.1f}%" if p is not None else "–"
                if xcol:
                    q = xc.pct(x["busbw_gbs"], size) \
                        if x and size > SMALL else None
                    pct += f" | {q:.0f}%" if q is not None else " | –"
                L.append(
                    f"| {fmt_size(size)} | "
                    f"{cell(x, size, ('xcoll', n, coll, size) in wrong)} | "
                    f"{LIB_NAMES[b[0]] if b else '–'} | {fmt_ratio(ratio)} | "
                    + " | ".join(cell(got.get(a), size,
                                      (a, n, coll, size) in wrong)
                                 for a in anchors) + f" | {pct} |")
            L.append("")
    return L


def failures(meta):
    bad = [r for r in meta["runs"] if r["status"] != 0]
    if not bad:
        return ["## Failures", "", "none", ""]
    L = ["## Failures", "", "| run | status | rows | stderr (tail) |",
         "|---|---|---|---|"]
    for r in bad:
        tail = r["stderr_tail"].replace("|", "/").replace("\n", " ⏎ ")[-300:]
        L.append(f"| {r['lib']} n={r['nranks']} {r['coll']} round "
                 f"{r['round']} | {r['status']} | {r['rows']} | {tail} |")
    return L + [""]


# ------------------------------------------------------------------ plot

def size_tics(lo, hi):
    tics, s = [], 1
    while s <= hi * 1.01:
        if s >= lo / 1.01:
            tics.append(f'"{fmt_size(s).replace(" ", "")}" {s}')
        s *= 16
    return "(" + ", ".join(tics) + ")"


def gnuplot_panels(best, libs, panels, datadir, lim):
    """gnuplot commands drawing one panel per (n, coll) of `panels`."""
    cmds = []
    for n, coll in panels:
        series = []
        for l in libs:
            pts = sorted((k[3], r["busbw_gbs"]) for k, r in best.items()
                         if k[0] == l and k[1] == n and k[2] == coll
                         and r["busbw_gbs"] > 0)
            if not pts:
                continue
            f = datadir / f"n{n}-{coll}-{l}.dat"
            f.write_text("".join(f"{s} {b}\n" for s, b in pts))
            series.append((l, f, pts))
        if not series:
            cmds.append("set multiplot next")
            continue
        sizes = [p[0] for _, _, pts in series for p in pts]
        plots = [f"'{f}' using 1:2 with linespoints lw 2 pt 7 ps 0.6 "
                 f"lc rgb '{LIB_COLORS[l]}' title '{LIB_NAMES[l]}'"
                 for l, f, _ in series]
        if lim:
            f = datadir / f"n{n}-{coll}-memcpy.dat"
            f.write_text("".join(f"{s} {lim.at(s)}\n"
                                 for s in sorted(set(sizes))))
            plots.append(f"'{f}' using 1:2 with lines dt 2 lw 1.5 "
                         "lc rgb '#555555' title 'memcpy (1 thread)'")
        cmds += [f"set title '{coll}, {n} ranks'",
                 f"set xtics {size_tics(min(sizes), max(sizes))}",
                 "plot " + ", ".join(plots)]
    return cmds


def plot(out, best, libs, meta, lim):
    if not shutil.which("gnuplot"):
        return "no plot: gnuplot not installed (apt-get install gnuplot-nox)"
    st = meta["settings"]
    datadir = out / "plot"
    datadir.mkdir(exist_ok=True)
    common = ["set logscale xy", "set grid", "set key bottom right font ',8'",
              "set xlabel 'size (bytes)'", "set ylabel 'busbw (GB/s)'",
              "set format y '%g'"]
    jobs = [("busbw.png", [(n, c) for n in st["ranks"] for c in st["colls"]],
             len(st["ranks"]), len(st["colls"]))]
    for n in st["ranks"]:
        cols = min(4, len(st["colls"]))
        rows = (len(st["colls"]) + cols - 1) // cols
        jobs.append((f"busbw-n{n}.png", [(n, c) for c in st["colls"]],
                     rows, cols))
    script = []
    for name, panels, rows, cols in jobs:
        script += [f"set terminal pngcairo size {420 * cols},{330 * rows} "
                   "font ',9'", f"set output '{out / name}'",
                   f"set multiplot layout {rows},{cols} title "
                   f"'busbw vs size: xcoll and anchors ({meta['date'][:10]})'"]
        script += common + gnuplot_panels(best, libs, panels, datadir, lim)
        script += ["unset multiplot", "set output"]
    (datadir / "busbw.gp").write_text("\n".join(script) + "\n")
    p = subprocess.run(["gnuplot", str(datadir / "busbw.gp")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        return f"gnuplot failed: {p.stdout[-500:]}"
    return None


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: report.py RESULTS_DIR")
    out = Path(argv[0])
    meta, best, wrong, limits = load(out)
    libs = meta["settings"]["libs"]
    lim = Limit(limits)
    err = plot(out, best, libs, meta, lim)
    L = header(meta, limits, lim)
    L += [f"Plot: {err}" if err else
          "Plot: [busbw.png](busbw.png) (one file per rank count: " +
          ", ".join(f"[busbw-n{n}.png](busbw-n{n}.png)"
                    for n in meta["settings"]["ranks"]) + ")", ""]
    L += overview(best, libs, meta, lim)
    L += tables(best, wrong, libs, meta, lim,
                Limit(limits, ("xcopy_sweep",), "2"))
    L += failures(meta)
    (out / "summary.md").write_text("\n".join(L))
    return 1 if err else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
