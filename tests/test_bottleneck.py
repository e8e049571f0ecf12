"""The bottleneck's arithmetic (DESIGN.md §7, olaf.drl.bottleneck), the RunConfig fields
that carry it, the command-line presets, and the cluster split of the workers."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from olaf.drl.bottleneck import (
    PRESETS,
    block_bytes,
    blocks_per_second,
    buffer_for,
    cluster_of,
    depth,
    egress_for,
    figures,
    offered_rate,
    rho,
    slots_of,
)
from olaf.drl.cli_args import add_run_arguments, config_from_args
from olaf.drl.config import RunConfig
from olaf.drl.worker_turn import build_worker
from worker_transport.transport import Transport


def test_block_bytes_slots_and_rate() -> None:
    assert block_bytes(64) == 36 + 4 * 64 == 292
    assert block_bytes(255) == 1056
    # 64 slots x 292 B = 18,688 B: today's queue; one byte less is one slot less.
    assert slots_of(18_688, 64) == 64
    assert slots_of(18_687, 64) == 63
    assert blocks_per_second(292_000.0, 64) == pytest.approx(1000.0)
    assert blocks_per_second(125e6, 64) == pytest.approx(428_082.19, rel=1e-6)


def test_rho_and_depth() -> None:
    # 8 workers, 40 blocks per gradient, a gradient every 10 ms: 8 * 40 * 292 / 0.01 B/s.
    offered = offered_rate(8, 40, 64, 0.01)
    assert offered == pytest.approx(9_344_000.0)
    assert rho(offered, 292_000.0) == pytest.approx(32.0)
    assert egress_for(4.0, offered) == pytest.approx(2_336_000.0)
    assert rho(offered, egress_for(4.0, offered)) == pytest.approx(4.0)
    assert depth(64, 40) == pytest.approx(1.6)
    # D gradients of 40 blocks: whole slots, at least one.
    assert buffer_for(10, 40, 64) == 400 * 292
    assert slots_of(buffer_for(10, 40, 64), 64) == 400
    assert buffer_for(0.001, 40, 64) == 292
    fig = figures(400, 1000.0, 64, 40)
    assert (fig.egress_rate, fig.buffer_bytes, fig.depth, fig.gradient_bytes) == (
        292_000.0, 116_800, 10.0, 11_680)
    assert fig.offered(100, 2.0) == pytest.approx(50 * 11_680)
    assert fig.rho(fig.offered(100, 2.0)) == pytest.approx(50 * 11_680 / 292_000)


def test_run_config_derives_capacity_and_pull_rate_from_b_and_c() -> None:
    plain = RunConfig()
    assert (plain.capacity, plain.pull_rate) == (64, 1000.0)  # pull_rate works as before
    cfg = RunConfig(egress_rate=125e6, buffer_bytes=173_000)
    assert cfg.capacity == 173_000 // 292 == 592
    assert cfg.pull_rate == pytest.approx(125e6 / 292)
    # replace keeps the derivation; so does another V.
    assert dataclasses.replace(cfg, values=255).capacity == 173_000 // 1056
    with pytest.raises(ValueError, match="buffer_bytes"):
        RunConfig(buffer_bytes=100)  # less than one block
    with pytest.raises(ValueError, match="clusters"):
        RunConfig(workers=4, clusters=5)
    with pytest.raises(ValueError, match="clock"):
        RunConfig(clock="sundial")
    with pytest.raises(ValueError, match="bottleneck"):
        RunConfig(bottleneck="tor-400g")


def parse(*argv: str) -> RunConfig:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10.0)
    return config_from_args(parser.parse_args(list(argv)), mode="olaf", seed=0, target=None)


def test_presets_and_flags() -> None:
    shallow = parse("--bottleneck", "shallow")
    assert (shallow.capacity, shallow.pull_rate) == (64, pytest.approx(1000.0))
    tor = parse("--bottleneck", "tor-1g", "--clusters", "4")
    p = PRESETS["tor-1g"]
    assert (tor.egress_rate, tor.buffer_bytes, tor.propagation_s, tor.uplink_rate) == (
        p.egress_rate, p.buffer_bytes, p.propagation_s, p.uplink_rate)
    assert tor.clusters == 4 and tor.bottleneck == "tor-1g"
    # A flag overrides the preset's number.
    own = parse("--bottleneck", "tor-10g", "--buffer-bytes", "29200", "--propagation-us", "5")
    assert own.capacity == 100 and own.propagation_s == pytest.approx(5e-6)
    assert own.pull_rate == pytest.approx(1.25e9 / 292)
    assert parse("--egress-rate", "58400").pull_rate == pytest.approx(200.0)
    for name, preset in PRESETS.items():
        assert preset.egress_rate > 0 and slots_of(preset.buffer_bytes, 64) >= 1, name


def test_bad_bottleneck_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--buffer-bytes", "10")
    assert exc.value.code == 2
    assert "buffer_bytes" in capsys.readouterr().err.strip()


class NoTransport(Transport):
    def send(self, packets):  # noqa: ANN001, ANN201
        return len(packets)

    def recv(self, timeout, max_count=4096):  # noqa: ANN001, ANN201
        return []

    def close(self) -> None:
        pass


def test_workers_are_split_over_the_clusters() -> None:
    assert [cluster_of(w, 3) for w in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert {cluster_of(w, 1) for w in range(8)} == {0}
    cfg = RunConfig(workers=8, clusters=4)
    ids = []
    for w in range(8):
        worker, sender = build_worker(cfg, w, w, None, lambda v: None, transport=NoTransport())
        ids.append(sender.cluster_id)
        worker.close()
    assert ids == [0, 1, 2, 3, 0, 1, 2, 3]
