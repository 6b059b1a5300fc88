"""Summarize the output of bench/shm-lat-pairs.sh.

    python3 bench/shm-lat-pairs-summary.py pairs.txt

For each goverbs column (one process, two processes, two with GOMAXPROCS=1;
p50 and mean) against UCX's: the median of the per-pair ratios, the ratio of
the medians, and how many pairs are within 1.5x; over all pairs and over
those where UCX ran in its usual mode (p50 0.14-0.20 us on the development
machine, which also has a slower mode).
"""

import statistics as st
import sys

rows = []
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    parts = [x.split() for x in line.split("|")]
    if any(len(p) != 2 for p in parts):
        continue
    rows.append(tuple(float(x) for p in parts for x in p))
usual = [r for r in rows if 0.14 <= r[0] <= 0.20]
print(len(rows), "pairs;", len(usual), "with UCX p50 in 0.14-0.20")
for name, sel in (("all", rows), ("ucx usual", usual)):
    if not sel:
        continue
    for lab, i, j in (("gv1/ucx p50", 2, 0), ("gv1/ucx mean", 3, 1), ("gv2/ucx p50", 4, 0),
                      ("gv2/ucx mean", 5, 1), ("gv2p1/ucx p50", 6, 0), ("gv2p1/ucx mean", 7, 1)):
        rs = [r[i] / r[j] for r in sel]
        ratio_of_medians = st.median([r[i] for r in sel]) / st.median([r[j] for r in sel])
        print(f"{name:10s} {lab:15s} median ratio {st.median(rs):.2f}  "
              f"ratio of medians {ratio_of_medians:.2f}  under1.5: {sum(x <= 1.5 for x in rs)}/{len(rs)}")
print("medians (all):", [round(st.median([r[i] for r in rows]), 3) for i in range(8)])
if usual:
    print("medians (usual):", [round(st.median([r[i] for r in usual]), 3) for i in range(8)])
