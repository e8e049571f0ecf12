"""The TNA test oracle: a source-level interpreter for the subset of P4_16 (TNA) that
p4/tna/olaf_tna.p4 uses.

Neither Tofino's assembler (bfas) nor a Tofino model is available, so the TNA program's
behaviour is checked by running its own text: preprocessing (#include, #define, -D),
parser states with header stacks, controls with actions and tables (exact and lpm
entries installed at run time; const entries on exact and ternary keys, `value &&& mask`
and `_`, the first matching entry winning; @stage and other annotations skipped),
sub-control calls with copy-in/copy-out, casts, wrap-around and saturating arithmetic
on bit<W>/int<W>, and Tofino 1's pipeline as the program uses it: Register/RegisterAction
(the apply body runs on the cell; one access per Register per packet pass; the index a
field, a constant or a Hash output, as bf-p4c demands), Hash (IDENTITY), Counter,
Random, Checksum, the 64-bit resubmit header (once per packet) and
recirculation through port 68, with intrinsic metadata reduced to the fields used.

What fits Tofino (stages, PHV, stateful ALU programs, gateways) is p4c-barefoot's to
say, not this interpreter's (tests/test_tna.py runs both). Anything outside the subset
raises ``P4SimError`` rather than guessing.

The package, one job per module: ``preprocess`` (#include, #define, lexing, macro
expansion), ``syntax`` (parsing the P4 subset into declarations), ``values`` (typed
values, headers, stacks), ``evaluate`` (expressions and assignments), ``externs`` (TNA's
Register/RegisterAction, Counter, Hash, Random, Checksum, Resubmit), ``tna`` (the
architecture's intrinsic metadata and ports) and ``switch`` (statements, tables, controls,
parsers and the resubmit/recirculation passes). Its only user is tests/test_tna.py, via
tests/p4_replay.py.
"""

from tests.p4sim.errors import P4SimError
from tests.p4sim.switch import Switch

__all__ = ["P4SimError", "Switch"]
