"""experiments.studies.fig5_samples: the regime measures' mean and t interval over
diagnostic samples."""
import json

import pytest

from experiments.configs.studies import fig5_samples as fig5_samples_config
from experiments.studies import fig5_samples


def _main(paths):
    config = fig5_samples_config.get_config()
    config.paths = tuple(paths)
    return fig5_samples.main(config)


def _doc(r_early, r_late, prog, none, run="factor_table_quick_warm/shop_factor_s42"):
    control = lambda r: {"pearson_r": r, "delta_progress_mean": prog,        # noqa: E731
                         "delta_no_progress_mean": none, "delta_progress_mean_no_feedback": 0.0,
                         "delta_no_progress_mean_no_feedback": 0.0, "tokens": 300}
    calib = {"corr": 0.5, "corr_interior": 0.25, "critic_loss": 1.0}
    return {"train_run": run, "feedback_control_early": control(r_early),
            "feedback_control_late": control(r_late),
            "calibration_early": calib, "calibration_late": calib}


def _write(tmp_path, docs):
    paths = []
    for i, d in enumerate(docs):
        p = tmp_path / f"s{i}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    return paths


def test_mean_and_t_interval_by_hand(tmp_path, capsys):
    # r 0.2 and 0.4: mean 0.3, SD 0.1414, t_{0.975, 1} = 12.706 -> half-width 1.2706
    paths = _write(tmp_path, [_doc(0.2, 0.1, 0.5, 0.1), _doc(0.4, 0.1, 0.3, 0.2)])
    assert _main(paths) == 0
    out = capsys.readouterr().out
    assert "| feedback control r (target <= 0.3) | 0.30 [-0.97, 1.57] | 0.10 [0.10, 0.10] |" in out
    # the split per sample: 0.4 and 0.1 -> mean 0.25
    values = fig5_samples.sample_values([json.loads(open(p).read()) for p in paths], paths)
    assert values[fig5_samples.SPLIT]["start"] == pytest.approx([0.4, 0.1])
    assert "2 diagnostic samples" in out


def test_one_sample_prints_its_value(tmp_path, capsys):
    _main(_write(tmp_path, [_doc(0.55, 0.46, 0.2, 0.1)]))
    assert "| feedback control r (target <= 0.3) | 0.55 | 0.46 |" in capsys.readouterr().out


def test_samples_of_two_runs_are_refused(tmp_path):
    paths = _write(tmp_path, [_doc(0.2, 0.1, 0.5, 0.1), _doc(0.2, 0.1, 0.5, 0.1, run="other")])
    with pytest.raises(SystemExit, match="paths: the samples must diagnose one run"):
        _main(paths)


def test_a_json_without_the_control_names_the_field(tmp_path):
    d = _doc(0.2, 0.1, 0.5, 0.1)
    del d["feedback_control_late"]
    with pytest.raises(SystemExit, match="no field 'feedback_control_late.pearson_r'"):
        _main(_write(tmp_path, [d]))
