"""experiments/studies/critic_fit.py: a fresh TAC head fitted on a replay learns it (held-out
error falls, r rises) and reports the steps asked for."""
import numpy as np

from experiments.studies import critic_fit


def test_fit_curve_learns_a_value_of_the_features():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (0.5 + 0.3 * np.tanh(x[:, 0])).astype(np.float32)
    curve = critic_fit.fit_curve(x, y, lr=1e-3, width=32, checks=(1, 100))
    assert [c["step"] for c in curve] == [1, 100]
    assert curve[1]["test_mse"] < 0.5 * curve[0]["test_mse"]
    assert curve[1]["test_r"] > 0.5 > curve[0]["test_r"]
