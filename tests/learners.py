"""The small, fast learner that tests of mechanisms (queue, P_s, worker scaling, chaos,
the virtual clock) train with: IMPACT sending one gradient per 4 x 32-step rollout
through the PS's Adam, with a 32-wide network, the default before issue 27's learner.
Its updates are small (40 CartPole blocks) and frequent, so a run of a few thousand env
steps has many of them; the default learner is tested by test_impact, test_run's
``olaf run`` tests and measured in docs/results.md."""

from __future__ import annotations

from olaf.drl.impact import ImpactConfig

GRADIENT_IMPACT = ImpactConfig(epochs=1, hidden=32, rollout_steps=32, envs_per_worker=4,
                               gamma=0.99, vtrace_lambda=0.95)
GRADIENT_FLAGS = ["--hidden", "32", "--envs-per-worker", "4", "--set", "algo.epochs=1",
                  "--set", "algo.rollout_steps=32", "--set", "algo.gamma=0.99",
                  "--set", "algo.vtrace_lambda=0.95"]
"""GRADIENT_IMPACT as ``olaf run``/``olaf compare`` flags."""
