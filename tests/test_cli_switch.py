"""``olaf switch`` refuses bad arguments at start-up: one line naming the culprit, exit 2, nothing opened."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from olaf.cli import main


@pytest.fixture(autouse=True)
def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A switch that got as far as serving accepted its arguments: fail at once instead of serving forever."""
    from dataplane.ethernet import EthernetSwitch
    from dataplane.switch import UdpSwitch

    def serve(*_: object) -> None:
        raise AssertionError("the switch accepted these arguments and started serving")

    monkeypatch.setattr(UdpSwitch, "serve", serve)
    monkeypatch.setattr(EthernetSwitch, "serve", serve)


def refuse(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``olaf switch ARGV`` in process; it must exit 2 with one line on stderr, which is returned."""
    try:
        code = main(["switch", *argv, "--stats-interval", "0"])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "listening on" not in out
    lines = [line for line in err.splitlines() if line.startswith("olaf switch: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


UDP = ["--listen", "127.0.0.1:0"]
P4RT = [*UDP, "--p4runtime", "0"]


@pytest.mark.parametrize(("argv", "culprit"), [
    ([*UDP, "--pcap", "/proc/olaf-no-such-dir"], "--pcap /proc/olaf-no-such-dir"),
    ([*UDP, "--pcap", "/etc/hostname"], "--pcap /etc/hostname: exists and is not a directory"),
    ([*UDP, "--stats-interval", "-1"], "--stats-interval"),
    ([*UDP, "--seed", "-1"], "--seed"),
    ([*UDP, "--threshold", "inf"], "--threshold"),
    ([*UDP, "--threshold", "nan"], "--threshold"),
    ([*UDP, "--cluster-quota", "0"], "--cluster-quota: 0 is outside 1..65535"),
    ([*UDP, "--cluster-quota", "-3"], "--cluster-quota"),
    ([*UDP, "--capacity", "8", "--cluster-quota", "9"], "--cluster-quota must be 1..--capacity (8), not 9"),
    ([*UDP, "--cluster-quota", "65"], "--cluster-quota must be 1..--capacity (64), not 65"),
    ([*UDP, "--route", "10.0.0.0/8=1"], "--route are for interface mode"),
    ([*UDP, "--drop-prob", "3:0.5"], "--drop-prob 3"),
    (["-i", "1@olaf-nosuch0"], "-i 1@olaf-nosuch0: there is no network interface"),
    (["-i", "1@lo", "-i", "1@lo"], "given twice"),
    (["-i", "1@lo", "--delay-ms", "2:5"], "--delay-ms 2"),
    ([*UDP, "--p4runtime", "192.0.2.1:0"], "--p4runtime 192.0.2.1:0: cannot listen"),
    ([*UDP, "--tls-cert", "x.pem"], "--tls-cert: TLS is for the P4Runtime server"),
    ([*P4RT, "--tls-cert", "x.pem"], "--tls-cert and --tls-key go together"),
    ([*P4RT, "--tls-cert", "/nonexistent/c.pem", "--tls-key", "k.pem"], "TLS certificate /nonexistent/c.pem"),
    ([*P4RT, "--tls-client-ca", "ca.pem"], "--tls-client-ca needs"),
])
def test_bad_arguments_are_refused_naming_the_argument(argv: list[str], culprit: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert culprit in refuse(argv, capsys)


def test_a_taken_port_blames_the_listen_address(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        line = refuse(["--listen", f"127.0.0.1:{port}", "--pcap", str(tmp_path / "pcap")], capsys)
    assert f"--listen 127.0.0.1:{port}: cannot listen there" in line


def test_p4runtime_listens_on_loopback_unless_told_otherwise() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "olaf.cli", "switch", "--listen", "127.0.0.1:0",
                             "--p4runtime", "0", "--stats-interval", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("listening on udp 127.0.0.1:")
        assert lines[1].startswith("p4runtime on 127.0.0.1:"), lines
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert "warning" not in err  # loopback needs no warning; every other plaintext address gets one
