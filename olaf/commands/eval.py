"""``olaf eval CHECKPOINT``: a checkpoint's weights evaluated as the run evaluates them, greedy
and stochastic on the same seeds, and a GIF of one greedy episode."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from olaf.argtypes import ranged

if TYPE_CHECKING:  # numpy only once the command runs: `olaf --help` stays fast
    import numpy as np

HELP = ("evaluate a run's checkpoint, greedy and stochastic on the same seeds (and write a GIF "
        "of one greedy episode)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                        help="a checkpoint directory (olaf run --checkpoint-dir) or its "
                        "checkpoint.npz")
    parser.add_argument("--episodes", type=ranged(1), default=None, metavar="N",
                        help="episodes of each policy, greedy and stochastic, stepped side by "
                        "side (default: the run's --eval-episodes)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the first evaluation environment (default: the seed of the "
                        "run's first evaluation, so the figure is comparable with its curve)")
    parser.add_argument("--gif", type=Path, default=None, metavar="PATH",
                        help="also play one greedy episode (seeded like the first evaluation "
                        "episode) with render_mode='rgb_array' and write it as an animated GIF")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def record_episode(policy: Any, env_id: str, seed: int) -> tuple[list[Any], float, float]:
    """Frames, return and the environment's frames per second of one greedy episode of
    ``policy`` (a model, as ``evaluate_greedy`` takes it), played by ``evaluate_greedy`` itself.

    The episode runs through a throw-away registration of ``env_id`` made with
    ``render_mode="rgb_array"`` and wrapped to keep every frame, so the actions are chosen
    exactly as in every evaluation of the run.
    """
    # gymnasium and torch (olaf.drl.evaluation): imported when the command runs, so
    # `olaf --help` stays fast.
    import gymnasium as gym

    # Frames are drawn off-screen: SDL needs no display (and stops asking for one).
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

    from olaf.drl.evaluation import evaluate_greedy

    frames: list[Any] = []
    fps: list[float] = []

    class Frames(gym.Wrapper):
        def reset(self, **kwargs: Any) -> Any:
            fps.append(float(self.env.metadata.get("render_fps") or 30))
            out = self.env.reset(**kwargs)
            frames.append(self.env.render())
            return out

        def step(self, action: Any) -> Any:
            out = self.env.step(action)
            frames.append(self.env.render())
            return out

    record_id = f"olaf-record/{env_id.replace('/', '_')}-{uuid.uuid4().hex[:8]}-v0"
    gym.register(id=record_id,
                 entry_point=lambda: Frames(gym.make(env_id, render_mode="rgb_array")))
    try:
        returns = evaluate_greedy(policy, record_id, 1, seed)
    finally:
        gym.registry.pop(record_id, None)
    return frames, float(returns[0]), fps[0]


def write_gif(frames: list[Any], path: Path, fps: float) -> None:
    # Pillow (~20 ms of imports): only for --gif, so `olaf --help` stays fast.
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], loop=0,
                   duration=max(20, int(round(1000 / fps))))


def score(returns: np.ndarray | None) -> dict[str, Any]:
    """Mean, std and the returns of one policy's episodes, JSON-ready; all None when the
    policy was not played (``evaluate_both``: a model that cannot sample), JSON having no NaN."""
    if returns is None:
        return {"mean": None, "std": None, "returns": None}
    return {"mean": float(returns.mean()), "std": float(returns.std()), "returns": returns.tolist()}


def run(args: argparse.Namespace) -> int:
    # olaf.drl.checkpoint (zipfile, olaf.drl.results): ~10 ms of imports that every `olaf ...`
    # would pay (cli.py builds every subcommand's parser), so imported when the command runs.
    from olaf.drl.checkpoint import CheckpointError, load

    def fail(message: str) -> int:
        print(f"olaf eval: error: {message}", file=sys.stderr)
        return 2

    if args.gif is not None and not args.gif.parent.is_dir():
        return fail(f"--gif: directory {args.gif.parent} does not exist")
    try:
        ckpt = load(args.checkpoint)
    except CheckpointError as exc:
        return fail(str(exc))

    # torch and gymnasium: imported once the checkpoint is read, so `olaf --help` and a bad
    # CHECKPOINT stay fast.
    import torch

    from olaf.algorithm import initial_model, load_flat_parameters
    from olaf.drl.evaluation import evaluate_both, evaluation_seed
    from olaf.drl.learners import make_algorithm

    torch.set_num_threads(1)
    cfg = ckpt.config
    # The model the run's evaluator builds, of the run's algorithm (built-in or MODULE:CLASS).
    try:
        model = initial_model(make_algorithm(cfg), cfg.env_id, cfg.seed)
        load_flat_parameters(model, ckpt.ps["params"])
    except (ValueError, ImportError) as exc:
        return fail(f"cannot rebuild the checkpoint's model ({cfg.algo} on {cfg.env_id}): {exc}")
    episodes = args.episodes or cfg.eval_episodes
    seed = args.seed if args.seed is not None else evaluation_seed(cfg.seed)
    # Both policies on the same seeds, as every evaluation of the run plays them.
    greedy, sampled = evaluate_both(model, cfg.env_id, episodes, seed)
    scores = {"greedy": score(greedy), "stochastic": score(sampled)}
    out = {"checkpoint": str(args.checkpoint), "env": cfg.env_id, "env_steps": ckpt.env_steps,
           "model_version": ckpt.model_version, "episodes": episodes, "seed": seed,
           "eval_policy": cfg.eval_policy,
           # mean, std, returns: the configured policy's, the figures the run's evaluation
           # of these weights has (they were the greedy ones before both were played).
           **scores[cfg.eval_policy],
           **{f"{name}_{key}": value for name, figures in scores.items()
              for key, value in figures.items()}}
    if args.gif is not None:
        frames, ret, fps = record_episode(model, cfg.env_id, seed)
        write_gif(frames, args.gif, fps)
        out.update(gif=str(args.gif), gif_frames=len(frames), gif_return=ret)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{cfg.env_id}, checkpoint at {ckpt.env_steps:,} env steps (model version "
              f"{ckpt.model_version}), {episodes} episodes of each policy (seed {seed}):")
        for name, figures in scores.items():
            if figures["returns"] is None:
                figure = "not played (the model has no act(obs, generator))"
            else:
                figure = f"{figures['mean']:.1f} ± {figures['std']:.1f}"
            mark = f" (configured: --eval-policy {name})" if name == cfg.eval_policy else ""
            print(f"  {name} return {figure}{mark}")
        if args.gif is not None:
            print(f"wrote {args.gif}: {len(frames)} frames, return {ret:.1f}")
    return 0
