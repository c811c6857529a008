"""Tests of the shared word-level tokenizer of the JAX-native environments
(asct_jax.envs.tokenizer)."""
import numpy as np
import pytest

from asct_jax.envs import EOS_ID, PAD_ID, SPECIAL_TOKENS
from asct_jax.envs.tokenizer import decode, encode_fixed, get_tokenizer, save_tokenizer


def test_tokenizer_vocab_and_roundtrip(tmp_path):
    from transformers import PreTrainedTokenizerFast

    tok = get_tokenizer()
    vocab = tok.get_vocab()
    assert [vocab[s] for s in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    words = sorted(vocab, key=vocab.get)[len(SPECIAL_TOKENS):]
    # The environments' words sorted, then the teacher instruction's words no environment
    # uses (asct_jax.envs.prompt): immediate, feedback, current, step, correctly, solve.
    env_words, extra = words[:-6], words[-6:]
    assert env_words == sorted(env_words) and len(vocab) < 1024
    assert extra == ["immediate", "feedback", "current", "step", "correctly", "solve"]
    save_tokenizer(str(tmp_path))
    tok2 = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    text = "now call the deep_retrieve tool take the apple from the fridge : 42"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok2(text, add_special_tokens=False)["input_ids"] == ids
    assert UNK_not_in(ids)
    assert tok2.pad_token_id == PAD_ID and tok2.eos_token_id == EOS_ID
    fixed = encode_fixed(text, 16)
    assert fixed.dtype == np.int32 and fixed.shape == (16,)
    assert list(fixed[: len(ids)]) == ids and np.all(fixed[len(ids):] == PAD_ID)
    assert decode(fixed) == text
    with pytest.raises(ValueError):
        encode_fixed(text, 4)
    with pytest.raises(ValueError):
        encode_fixed("xylophone", 4)


def UNK_not_in(ids):
    return 2 not in ids
