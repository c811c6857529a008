"""Tests of `shop` (asct_jax.envs.shop) beyond the protocol of test_envs.py."""
import jax

from asct_jax.envs import make
from asct_jax.envs.tokenizer import decode, get_tokenizer


def test_shop_named_fields():
    from asct_jax.envs.shop import Goal, Page

    env, p = make("shop")
    s, ts = env.reset(jax.random.PRNGKey(0), p)
    assert int(s.page) == Page.SEARCH and "search" in decode(ts.observation)
    color = get_tokenizer().decode([int(env.w_color[int(s.goal[Goal.COLOR])])])
    assert f"in {color}" in decode(ts.observation)
