"""Host games' text <-> token ids (asct_jax.rl.host_text)."""
from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.rl.host_text import CommandEncoder
from asct_jax.rl.host_tokenizer import build_tokenizer


def test_candidate_selection_is_deterministic():
    cmds = ["examine a", "take red bell pepper from fridge", "go north", "go north", "look",
            "eat meal", "inventory", "open door"]
    enc = CommandEncoder(build_tokenizer(cmds), 4)
    kept, toks = enc.candidates(cmds, 3)
    assert kept == ["go north", "eat meal", "open door"]  # too long / dup / observe-only out
    assert all(len(t) == 4 and t[-1] in (EOS_ID, PAD_ID) for t in toks)
    assert enc.stats["too_long"] == 1 and enc.stats["duplicates"] == 1
    assert enc.candidates(cmds, 3) == (kept, toks)
