"""asct_jax.envs.ragspace.spec: the stage / label / index constants agree with each other
(and with the env's single-word labels and 6-token descriptions), the dataset mixes are
distributions, the calibration constants keep their documented orderings, the presets,
`RagSpaceParams.validate` (one-line ConfigError naming the field and what is allowed, at
the exact bounds), `split_range` (train, val, test partition the pool) and `num_legal`.
No jit: everything here is static Python / NumPy."""
import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs.ragspace import spec
from asct_jax.envs.ragspace.spec import (CAL, CHOICE_STAGES, CONTEXT, CONTROL, DONE, LABELS,
                                         MAX_ROUNDS, MIX, QUERY, RERANK, RETRIEVER,
                                         SELECTION, STAGES, WIDTH, RagSpaceParams)
from asct_jax.envs.tokenizer import encode_fixed
from asct_jax.infra.checks import ConfigError

SMALL = RagSpaceParams.small()


def _error(params):
    with pytest.raises(ConfigError) as e:
        params.validate()
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ---------------------------------------------------------------------------- constants
def test_stage_indices_name_the_stages_and_choice_slots_skip_control():
    for name in STAGES:
        assert STAGES[getattr(spec, name.upper())] == name
    assert DONE == len(STAGES) == len(LABELS) == 7
    assert CHOICE_STAGES == tuple(s for s in range(DONE) if s != CONTROL)
    assert len(CHOICE_STAGES) == 6                       # RagSpaceState.choice is [6]


def test_index_classes_name_their_slots():
    labels = lambda stage: [label for label, _ in LABELS[stage]]
    assert labels(QUERY) == ["original", "query2doc", "decompose"]
    assert (spec.Q.ORIGINAL, spec.Q.QUERY2DOC, spec.Q.DECOMPOSE) == (0, 1, 2)
    ret = labels(RETRIEVER)
    assert [ret[i] for i in (spec.R.BM25, spec.R.E5, spec.R.BGE_M3, spec.R.QWEN3,
                             spec.R.RRF)] == ["bm25", "e5", "bge_m3", "qwen3_embed", "rrf"]
    assert spec.R.PROBE == len(ret)                      # A: the slot appended with probe
    assert spec.PROBE_LABEL not in ret
    assert (spec.Qtype.BRIDGE, spec.Qtype.COMPARISON) == (0, 1)
    assert labels(CONTROL) == ["stop", "continue"]      # the env: slot 1 retrieves again
    assert labels(WIDTH) == ["3", "6"] and labels(CONTEXT) == ["top2", "top4"]
    assert labels(RERANK) == ["keep", "rerank"] and len(LABELS[SELECTION]) == 2


def test_labels_are_distinct_single_words_that_fit_the_env_tables():
    """The env reads each label as one token and '{label} {description}' as <= 6."""
    for stage in LABELS:
        assert len({label for label, _ in stage}) == len(stage)
        for label, desc in stage:
            assert np.sum(encode_fixed(label, 1) != 0) == 1, label
            encode_fixed(f"{label} {desc}", 6)           # raises if longer or unknown
    for desc in spec.PROBE_DESCRIPTIONS.values():
        encode_fixed(f"{spec.PROBE_LABEL} {desc}".strip(), 6)
    assert np.sum(encode_fixed(spec.PROBE_LABEL, 1) != 0) == 1
    assert spec.PROBE_DESCRIPTIONS["name"] == ""         # the label alone
    assert [len(c) for c in spec.CUE_WORDS] == [2, 2]
    for words in spec.CUE_WORDS:
        for w in words:
            assert np.sum(encode_fixed(w, 1) != 0) == 1


def test_each_dataset_mix_is_a_distribution():
    assert set(MIX) == set(spec.DATASETS) and len(spec.DATASETS) == 3
    for name, m in MIX.items():
        assert set(m) == {"p_bridge", "p_diff", "p_hops", "lex_shift", "p_rare", "p_late",
                          "thr_shift"}, name
        for k in ("p_diff", "p_hops"):
            p = np.asarray(m[k])
            assert p.shape == (3,) and np.all(p >= 0) and np.isclose(p.sum(), 1.0), (name, k)
        for k in ("p_bridge", "p_rare", "p_late"):
            assert 0.0 <= m[k] <= 1.0, (name, k)
        assert -1.0 < m["lex_shift"] < 1.0
    assert MIX["hotpot"]["p_hops"] == (1.0, 0.0, 0.0)                # 2 hops only
    assert MIX["musique"]["p_bridge"] == 1.0                         # all chains


def test_calibration_constants_keep_their_documented_orderings():
    thr, f_full, pen = (np.asarray(CAL[k]) for k in ("thr", "f_full", "noise_pen"))
    assert thr.shape == f_full.shape == pen.shape == (3,)            # easy, medium, hard
    assert np.all(np.diff(thr) > 0) and np.all(np.diff(f_full) < 0) and np.all(np.diff(pen) > 0)
    assert np.all((f_full > 0) & (f_full <= 1)) and 0 < CAL["g0"] < 1 and CAL["gamma"] > 0
    assert np.asarray(CAL["qual"]).shape == (4, 4)                   # bm25 e5 bge_m3 qwen3
    assert len(CAL["rrf_mix"]) == 3 and len(CAL["q2d"]) == 4 and len(CAL["dec"]) == 3
    assert len(CAL["refine"]) == 4 and len(CAL["dup_pen"]) == 2
    assert CAL["probe_bonus"][1] > CAL["probe_bonus"][0]             # answer hop first
    assert CAL["chain_pen"][1] > CAL["chain_pen"][0]                 # late: harder
    # the nominal question tokens follow the simulator's q_tok = round(1.3 q_words)
    assert CAL["Q_TOK_NOMINAL"] == round(1.3 * CAL["Q_WORDS_NOMINAL"])
    assert CAL["WORD_SCALE"] == 4096.0
    assert spec.MAX_HOPS == 4 and MAX_ROUNDS == 3


# ---------------------------------------------------------------------------- settings
def test_presets_differ_only_in_dataset_and_validate():
    small, hard = RagSpaceParams.small(), RagSpaceParams.hard()
    assert (small.dataset, hard.dataset) == ("hotpot", "musique")
    for f in dataclasses.fields(RagSpaceParams):
        if f.name != "dataset":
            a, b = getattr(small, f.name), getattr(hard, f.name)
            assert np.array_equal(np.asarray(a), np.asarray(b)), f.name
    small.validate(), hard.validate()
    assert small.split == "train" and not small.probe and small.num_retrievers == 5
    assert small.num_questions == 2800 and small.split_range() == (0, 2000)


def test_only_lam_and_cue_acc_are_traced_leaves():
    leaves = jax.tree.leaves(SMALL)
    assert [x.shape for x in leaves] == [(), ()]
    assert [str(x.dtype) for x in leaves] == ["float32", "float32"]
    assert np.allclose([float(x) for x in leaves], [0.1, 0.8])        # lam, cue_acc
    # a static field is part of the structure: another value is another treedef
    for field, value in (("dataset", "twowiki"), ("obs_len", 65), ("probe", True)):
        other = SMALL.replace(**{field: value})
        assert jax.tree.structure(other) != jax.tree.structure(SMALL), field
    assert jax.tree.structure(SMALL.replace(lam=np.float32(0.3))) == jax.tree.structure(SMALL)


@pytest.mark.parametrize("field,value,allowed", [
    ("dataset", "nq", "hotpot, twowiki, musique"),
    ("split", "dev", "train, val, test"),
    ("describe", "yes", "True, False"),
    ("probe", None, "True, False"),
    ("probe_description", "x", "relation, type, name, opposite"),
])
def test_a_bad_choice_is_a_one_line_error_naming_field_and_allowed(field, value, allowed):
    msg = _error(SMALL.replace(**{field: value}))
    assert msg.startswith(f"{field}: {value!r} is not allowed") and msg.endswith(allowed)


RANGES = {"n_train": 1, "n_val": 1, "n_test": 1, "max_turns": 1, "pool_seed": 0,
          "action_len": 2, "feedback_len": 7, "obs_len": 57}


@pytest.mark.parametrize("field", sorted(RANGES))
def test_integer_fields_are_checked_at_their_exact_lower_bound(field):
    lo = RANGES[field]
    SMALL.replace(**{field: lo}).validate()
    SMALL.replace(**{field: lo + 1000}).validate()
    for bad, problem in ((lo - 1, f"{lo - 1} is out of range"),
                         (lo + 0.5, "expected an int"), (True, "expected a number"),
                         (str(lo), "expected a number")):
        msg = _error(SMALL.replace(**{field: bad}))
        assert msg.startswith(f"{field}: {problem}"), msg
        assert msg.endswith(f"allowed: int in [{lo}, inf)"), msg


def test_obs_len_bound_is_the_longest_rendering_of_k_retrievers():
    """27 + 6 K tokens: 57 without the probe (K = 5), 63 with it (K = 6)."""
    probe = SMALL.replace(probe=True)
    assert probe.num_retrievers == 6
    probe.replace(obs_len=63).validate()
    assert _error(probe.replace(obs_len=62)).endswith("allowed: int in [63, inf)")
    SMALL.replace(obs_len=57).validate()


@given(n=st.tuples(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000)))
def test_the_splits_partition_the_pool_in_order_train_val_test(n):
    p = SMALL.replace(n_train=n[0], n_val=n[1], n_test=n[2])
    ranges = [p.replace(split=s).split_range() for s in spec.SPLITS]
    assert ranges[0][0] == 0 and ranges[-1][1] == p.num_questions == sum(n)
    for (lo, hi), (lo2, _), size in zip(ranges, ranges[1:] + [(sum(n), None)], n):
        assert hi - lo == size and hi == lo2


@pytest.mark.parametrize("field,value", [("dataset", ("hotpot", "musique")),
                                         ("split", ["train", "val"]),
                                         ("probe_description", ("name", "type"))])
def test_a_sequence_of_allowed_values_is_not_one_allowed_value(field, value):
    # check_choice takes a single value: a tuple / list of allowed values is refused at
    # validate(), not later as a bare KeyError / TypeError.
    assert "expected one value" in _error(SMALL.replace(**{field: value}))


# ---------------------------------------------------------------------------- num_legal
EXPECTED_LEGAL = {QUERY: 3, SELECTION: 2, WIDTH: 2, RERANK: 2, CONTEXT: 2, DONE: 0}


@pytest.mark.parametrize("k", [5, 6])
def test_num_legal_per_stage_round_and_retriever_count(k):
    for stage in range(DONE + 1):
        for rounds in range(0, MAX_ROUNDS + 2):
            n = spec.num_legal(stage, rounds, k)
            if stage == RETRIEVER:
                want = k
            elif stage == CONTROL:
                want = 2 if rounds < MAX_ROUNDS else 1              # round 3: stop only
            else:
                want = EXPECTED_LEGAL[stage]
            assert n == want, (stage, rounds, k)
            if stage < DONE and stage != RETRIEVER:
                assert n <= len(LABELS[stage])
