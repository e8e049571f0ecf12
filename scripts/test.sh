#!/usr/bin/env bash
# The whole suite on two cores (what `make test` and CI run): the HDL benches and proofs
# in fpga/tb/ in one pytest, tests/ in a second one beside it.
#
# Why two: run one after the other they took 33-34 of CI's 35 minutes on its 2-core
# machine, and most of fpga/tb/ is single-threaded (Icarus, Verilator's simulations,
# yosys, nextpnr, the SMT solvers) while tests/ waits on sockets, Mininet and bmv2 much
# of the time. The two share nothing: fpga/tb/ builds under its own tmp and sim_build
# folders, opens no socket and creates no namespace. No test is timed, so sharing the
# CPU can only lengthen them, within their timeouts.
#
# fpga/tb/'s report is printed after tests/'s, whole, so neither is interleaved; the exit
# code is the first non-zero of the two. Arguments go to both pytests (e.g. -x, -k).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
LOG=build/pytest-fpga.log
mkdir -p build

"$BIN/pytest" -p no:cacheprovider fpga/tb "$@" > "$LOG" 2>&1 &
hdl=$!
"$BIN/pytest" tests "$@"
rest=$?
wait "$hdl"
hdl_rc=$?
echo
echo "==================== fpga/tb (ran beside tests/; also in $LOG) ===================="
cat "$LOG"
echo "tests/: exit $rest; fpga/tb/: exit $hdl_rc"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$hdl_rc"
