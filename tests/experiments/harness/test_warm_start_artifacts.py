"""The warm starts shipped with the code (experiments/artifacts/warm_start/,
experiments/harness/warm_start_artifacts.py): found by the smoke configs, copied by
experiments.harness.warm_start.shared instead of made, small, and (slow) exactly what a rebuild
makes."""
import json
import os

import numpy as np
import pytest

from experiments.harness import warm_start, warm_start_artifacts
from experiments.harness.dotted import apply_overrides, flatten
from experiments.harness.stored_fields import renamed

REGENERATE = "python -m experiments.harness.warm_start_artifacts"


@pytest.mark.parametrize("module,arg", warm_start_artifacts.SHIPPED)
def test_every_smoke_run_finds_its_shipped_warm_start(module, arg):
    for variant, config in warm_start_artifacts.variant_configs(module, arg):
        name = warm_start.key(config)
        assert warm_start.artifact(config) is not None, (
            f"{variant}: no shipped warm start {name} under "
            f"{os.path.relpath(warm_start.ARTIFACTS)} (a warm-start field of the config "
            f"changed): regenerate it with `{REGENERATE}` and delete the stale one")


def test_the_shipped_warm_starts_are_the_smoke_configs_and_small():
    names = sorted(warm_start_artifacts.shipped_configs())
    assert sorted(os.listdir(warm_start.ARTIFACTS)) == names, (
        f"stale or missing warm starts: regenerate with `{REGENERATE}`")
    total = 0
    for name in names:
        root = os.path.join(warm_start.ARTIFACTS, name)
        assert {"checkpoint", "config.json", "summary.json"} <= set(os.listdir(root))
        total += sum(os.path.getsize(os.path.join(d, f))
                     for d, _, files in os.walk(root) for f in files)
    assert total < 4e6, total


def test_shared_copies_a_shipped_warm_start_and_checks_its_config(tmp_path, monkeypatch):
    from asct_jax.infra.config_cli import config_to_dict
    from experiments.configs import factor_table

    config = apply_overrides(factor_table.get_config("smoke_warm"), {"env.name": "shop"})
    config.train.results_dir = str(tmp_path / "results")
    shipped = tmp_path / "artifacts"
    fake = shipped / warm_start.key(config)
    (fake / "checkpoint").mkdir(parents=True)
    (fake / "checkpoint" / "params").write_text("p")
    (fake / "config.json").write_text(json.dumps(config_to_dict(config)))
    (fake / "summary.json").write_text("{}")
    monkeypatch.setattr(warm_start, "ARTIFACTS", str(shipped))
    monkeypatch.setattr(warm_start, "run", lambda *a: pytest.fail("made, not copied"))
    out = warm_start.shared(config)
    assert out == os.path.join(config.train.results_dir, "warm_start", warm_start.key(config))
    assert open(os.path.join(out, "checkpoint", "params")).read() == "p"
    assert warm_start.shared(config) == out            # reused after
    # Another warm-start field: another name, nothing shipped, made.
    other = apply_overrides(config, {"warm_start.seed": config.warm_start.seed + 1})
    assert warm_start.artifact(other) is None


def _params(directory):
    import orbax.checkpoint as ocp

    step = os.path.join(os.path.abspath(directory), "checkpoint", "0", "state")
    import jax
    return jax.tree_util.tree_flatten_with_path(ocp.PyTreeCheckpointer().restore(step))[0]


def _without_opt_level(flags: str) -> str:
    return " ".join(f for f in flags.split()
                    if not f.startswith("--xla_backend_optimization_level"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(warm_start_artifacts.shipped_configs()))
def test_a_rebuild_makes_the_shipped_warm_start_bit_for_bit(name, tmp_path):
    # In a fresh process at XLA's default optimisation level, as the shipped ones were made
    # (this test run compiles at level 0: tests/conftest.py).
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS=_without_opt_level(os.environ.get("XLA_FLAGS", "")))
    subprocess.run([sys.executable, "-m", "experiments.harness.warm_start_artifacts",
                    f"--config.out={tmp_path}", f"--config.only={name}"], check=True, env=env)
    out = os.path.join(str(tmp_path), name)
    shipped = os.path.join(warm_start.ARTIFACTS, name)
    new, old = _params(out), _params(shipped)
    assert [p for p, _ in new] == [p for p, _ in old]
    for (path, a), (_, b) in zip(new, old):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (
            f"{name}: {path} differs from the shipped one; regenerate with "
            f"`{REGENERATE} --config.force`")
    # The fields the warm start reads (its name's): a section it does not read may gain
    # fields since the shipped one was made (e.g. sweep.edge_extensions).
    with open(os.path.join(out, "config.json")) as f, \
            open(os.path.join(shipped, "config.json")) as g:
        made, kept = (warm_start.depends_on(flatten(json.load(h))) for h in (f, g))
    assert made == kept
    with open(os.path.join(out, "summary.json")) as f, \
            open(os.path.join(shipped, "summary.json")) as g:
        # the shipped summary's warm_start section may hold the fields' old names
        timeless = [{k: v for k, v in renamed(flatten(json.load(h))).items()
                     if not k.endswith("_s")} for h in (f, g)]
    assert timeless[0] == timeless[1]
