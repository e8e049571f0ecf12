#!/bin/bash
# The runs of docs/results.md, "A real kernel bottleneck" (issue 30 item 3): star2 on
# Mininet, CartPole-v1 with the main job's learner, the PS's link shaped by tc to 1.416
# Mbit/s (530 DATA frames/s of 334 B), real clock, nothing else running. As root, from the
# repository; writes runs/tc-bottleneck/NAME, then `.venv/bin/python docs/results/tc-bottleneck/table.py`
# reads runs copied beside it.
T="olaf testbed run star2 --duration 180 --total-steps 4000000 --ps-link-rate 1416kbit"
run() { name=$1; shift; $T "$@" --out "runs/tc-bottleneck/$name"; }
for s in 1 2 3 4 5; do
  for m in olaf fifo; do
    # S: the switch's queue holds the buffer (1,000 slots, D = 25); the PS pulls 5 % above
    #    the link, so the kernel's pfifo of 32 frames only smooths it.
    run "S-soft-$m-s$s" --switch soft --capacity 1000 --pull-rate 560 --ps-link-limit 32p --mode $m --seed $s
    # K: the kernel's pfifo holds the buffer (1,000 frames, D = 25 on the wire) behind bmv2's
    #    64-slot queue (the v1model program's maximum); the PS pulls at the default 1,000/s.
    run "K-bmv2-$m-s$s" --switch bmv2 --capacity 64 --pull-rate 1000 --ps-link-limit 1000p --mode $m --seed $s
  done
done
for s in 1 2 3; do
  for m in olaf fifo; do  # K on the software switch: the placement without bmv2's limits
    run "K-soft-$m-s$s" --switch soft --capacity 64 --pull-rate 1000 --ps-link-limit 1000p --mode $m --seed $s
  done
done
