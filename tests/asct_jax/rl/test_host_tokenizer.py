"""The word-level tokenizer of the host games (asct_jax.rl.host_tokenizer), built from real
TextWorld games (generated on first use): the slow tier."""
import os

import pytest

from asct_jax.envs.base import EOS_ID, PAD_ID, SPECIAL_TOKENS
from asct_jax.envs.external import TextWorldEnv
from asct_jax.rl.host_tokenizer import build_tokenizer, game_texts
from experiments.harness.make_textworld_games import DEFAULT_OUT, make_games

pytestmark = pytest.mark.slow

NUM_GAMES = 2


@pytest.fixture(scope="module")
def games_tokenizer(tmp_path_factory):
    games = make_games(3, out=os.environ.get("ASCT_JAX_TEXTWORLD_GAMES", DEFAULT_OUT),
                       go=6)[:NUM_GAMES]
    tok = build_tokenizer(game_texts(TextWorldEnv(games, max_turns=10), range(NUM_GAMES),
                                     random_episodes=1, max_steps=10))
    tok_dir = str(tmp_path_factory.mktemp("tok"))
    tok.save_pretrained(tok_dir)
    return dict(tok=tok, tok_dir=tok_dir)


def test_tokenizer_special_ids_and_reload(games_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tok = games_tokenizer["tok"]
    assert [tok.convert_tokens_to_ids(s) for s in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
    assert len(tok) < 1000
    back = PreTrainedTokenizerFast.from_pretrained(games_tokenizer["tok_dir"])
    text = "Take the Red Bell Pepper from the fridge."
    assert back(text)["input_ids"] == tok(text)["input_ids"]
    assert tok.unk_token_id not in tok("take cookbook from table")["input_ids"]
