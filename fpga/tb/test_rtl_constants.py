"""The RTL's wire constants agree with worker_transport (DESIGN.md §6: checked by a test).

Reads the localparams of the queue's RTL (olaf_queue.v, olaf_verdict.v) and compares
message types, outcomes, invalid-message verdicts, the header length and the feedback
revision with the Python definitions, so a renumbering on either side fails here before
any simulation runs.
"""

from __future__ import annotations

import re

from sim_runner import RTL_SOURCES

from dataplane.queue import DEFAULT_FEEDBACK, FEEDBACK_REVISIONS
from worker_transport.codec import Verdict
from worker_transport.protocol import HEADER_LEN, MsgType, Outcome

ASSIGNMENT = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*=\s*(?:\d+'d)?(\d+)\b")


def rtl_localparams() -> dict[str, int]:
    """Every ``NAME = value`` (decimal or sized ``N'dV``) inside localparam statements.

    A name declared in more than one file must have one value everywhere.
    """
    values: dict[str, int] = {}
    for src in RTL_SOURCES:
        text = re.sub(r"//.*", "", src.read_text())
        for statement in re.findall(r"localparam\b(.*?);", text, flags=re.S):
            for name, value in ASSIGNMENT.findall(statement):
                assert values.setdefault(name, int(value)) == int(value), f"{name} differs in {src.name}"
    return values


def test_message_types_match_protocol() -> None:
    params = rtl_localparams()
    for msg_type in MsgType:
        assert params[f"T_{msg_type.name}"] == msg_type.value, msg_type.name


def test_outcomes_match_protocol() -> None:
    params = rtl_localparams()
    for outcome in Outcome:
        assert params[f"O_{outcome.name}"] == outcome.value, outcome.name


def test_verdicts_match_codec() -> None:
    params = rtl_localparams()
    for verdict in Verdict:
        assert params[f"VD_{verdict.name}"] == verdict.value, verdict.name
    # The RTL answers exactly the verdicts the codec says are answered.
    first_answered = min(v for v in Verdict if v.answered)
    assert all(v.answered == (v >= first_answered) for v in Verdict)
    assert params["VD_BAD_LENGTH"] == first_answered.value


def test_header_length_matches_protocol() -> None:
    assert rtl_localparams()["HDR"] == HEADER_LEN


def test_feedback_revisions_match_the_reference() -> None:
    # cfg_feedback == FEEDBACK_REV2 selects revision 2; any other value is revision 3.
    assert rtl_localparams()["FEEDBACK_REV2"] == FEEDBACK_REVISIONS[0] == 2
    assert DEFAULT_FEEDBACK == FEEDBACK_REVISIONS[-1] == 3
