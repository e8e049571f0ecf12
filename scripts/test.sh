#!/usr/bin/env bash
# The whole suite on two cores (what `make test` and CI run), as two pytest processes:
#   tools: fpga/tb/ (the HDL benches and proofs), the Tofino compile (tests/test_tna.py)
#          and the Z3 models (tests/test_verification*.py);
#   rest:  everything else in tests/.
#
# Why two: run one after the other they took 33-34 of CI's 35 minutes on its 2-core
# machine. The tools half is single-threaded compilers, simulators and solvers (Icarus,
# Verilator, yosys, nextpnr, p4c-barefoot, Z3); the rest waits on sockets, Mininet and
# bmv2 much of the time. The halves share nothing: the tools half opens no socket and
# creates no namespace, and builds under its own tmp and sim_build folders. No test is
# timed, so sharing the CPU can only lengthen them, within their timeouts. The split
# was sized on the fresh clone of 0657232: fpga/tb alone took 616 s, tests/ 1,023 s.
#
# The tools half's report is printed after the rest's, whole, so neither is interleaved;
# the exit code is the first non-zero of the two. Arguments go to both (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
LOG=build/pytest-tools.log
TOOLS=(fpga/tb tests/test_tna.py tests/test_verification*.py)
mkdir -p build

"$BIN/pytest" -p no:cacheprovider "${TOOLS[@]}" "$@" > "$LOG" 2>&1 &
tools=$!
ignore=()  # the rest is tests/ less the tools half's files there
for path in "${TOOLS[@]}"; do [[ $path == tests/* ]] && ignore+=(--ignore "$path"); done
"$BIN/pytest" tests "${ignore[@]}" "$@"
rest=$?
wait "$tools"
tools_rc=$?
echo
echo "========== ${TOOLS[*]} (ran beside the rest; also in $LOG) =========="
cat "$LOG"
echo "the rest: exit $rest; the tools half: exit $tools_rc"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$tools_rc"
