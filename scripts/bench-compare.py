#!/usr/bin/env python3
"""Compares two `strata` binaries with `strata bench`, run alternately on one machine.

    scripts/bench-compare.py OLD_BINARY NEW_BINARY [--runs 5] [--out DIR]

Each binary runs `strata bench --json` RUNS times, old and new alternating, so that drift in
the machine (other load, the host's memory bandwidth) falls on both. For every row it
reports both medians and the old binary's worst run, and marks a regression: the new median
more than 5% worse than the old median *and* worse than the old worst run. "Worse" follows
the row's unit: lower is better for times (ns, µs), counts and ratios, higher for rates
(any unit per second: GB/s, GFLOP/s, batches/s). The memory-copy probe of each run is printed as a range for each
binary, to show how much the machine itself moved. Exits 1 when a row regresses.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = "memory-copy probe"


def lower_is_better(row):
    """Times, counts and reserved/peak ratios improve downwards; rates (any unit per
    second: GB/s, GFLOP/s, batches/s) upwards."""
    return not row["unit"].endswith("/s")


def run_once(binary, path):
    subprocess.run(
        [binary, "bench", "--json", path],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with open(path, encoding="utf-8") as f:
        return {row["name"]: row for row in json.load(f)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", help="keep every run's JSON in this folder")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="bench-compare-")
    os.makedirs(out, exist_ok=True)

    runs = {"old": [], "new": []}
    for i in range(args.runs):
        for which in ("old", "new"):
            binary = args.old if which == "old" else args.new
            path = os.path.join(out, f"{which}-{i}.json")
            runs[which].append(run_once(binary, path))
            print(f"run {i + 1}/{args.runs} {which} done", file=sys.stderr)

    names = [n for n in runs["old"][0] if all(n in r for r in runs["new"])]
    regressions = []
    print("| benchmark | old median | old worst | new median | change | unit | verdict |")
    print("|---|---:|---:|---:|---:|---|---|")
    for name in names:
        old = [r[name]["strata"] for r in runs["old"] if r[name]["strata"] is not None]
        new = [r[name]["strata"] for r in runs["new"] if r[name]["strata"] is not None]
        if not old or not new:
            continue
        row = runs["old"][0][name]
        lower = lower_is_better(row)
        om, nm = statistics.median(old), statistics.median(new)
        worst = max(old) if lower else min(old)
        if om == 0:
            change = 0.0
        else:
            change = (nm - om) / om * 100.0
        worse_by = change if lower else -change
        beyond_worst = nm > worst if lower else nm < worst
        regressed = worse_by > 5.0 and beyond_worst and name != PROBE
        verdict = "REGRESSED" if regressed else "ok"
        if regressed:
            regressions.append(name)
        print(
            f"| {name} | {om:.2f} | {worst:.2f} | {nm:.2f} | {change:+.1f}% "
            f"| {row['unit']} | {verdict} |"
        )
    for which in ("old", "new"):
        probes = [r[PROBE]["strata"] for r in runs[which] if PROBE in r]
        if probes:
            print(f"\n{which}: memory-copy probe {min(probes):.2f} to {max(probes):.2f} GB/s")
    print(f"\nruns kept in {out}")
    if regressions:
        print("regressed: " + ", ".join(regressions))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
