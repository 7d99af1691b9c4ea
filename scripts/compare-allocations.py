#!/usr/bin/env python3
"""Compare the `allocations` of two `strata conform --allocations` results files.

    scripts/compare-allocations.py CPU.json OTHER.json [--all]

Every program that ran without an error in CPU.json must report the same events and peaks
in OTHER.json (a meta run, a run under another thread count, a run in another process).
With --all, programs that stopped with an error are compared too. Prints the programs that
differ, with their first differing event, and exits 1 if any does.
"""
import json
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    everything = "--all" in sys.argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        base = {json.dumps(r["id"]): r for r in json.load(f)["results"]}
    with open(args[1]) as f:
        other = {json.dumps(r["id"]): r for r in json.load(f)["results"]}
    compared = differing = 0
    for key, a in base.items():
        if a.get("error") is not None and not everything:
            continue
        b = other.get(key)
        if b is None:
            print(f"{key}: missing from {args[1]}")
            differing += 1
            continue
        compared += 1
        aa, ba = a.get("allocations"), b.get("allocations")
        if aa is None or ba is None:
            print(f"{key}: no allocations reported (run with --allocations)")
            differing += 1
            continue
        if aa == ba:
            continue
        differing += 1
        ea, eb = aa["events"], ba["events"]
        first = next((i for i, (x, y) in enumerate(zip(ea, eb)) if x != y), min(len(ea), len(eb)))
        print(
            f"{key}: events {len(ea)} vs {len(eb)}, first difference at {first}: "
            f"{ea[first] if first < len(ea) else None} vs {eb[first] if first < len(eb) else None}; "
            f"peaks {aa['peak_allocated']}/{aa['peak_reserved']} vs "
            f"{ba['peak_allocated']}/{ba['peak_reserved']}"
            + (f"; other error: {b['error']}" if b.get("error") else "")
        )
    print(f"{compared - differing}/{compared} programs agree")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
