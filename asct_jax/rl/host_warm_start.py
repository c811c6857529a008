"""A warm start from expert paths on host games (ScienceWorld's gold paths): SFT of the
actor on the expert's turns, then the value head on the warm actor's own returns.

    params, info = host_warm_start(run, source, paths)   # run: a RunConfig
    # source: asct_jax.rl.host_games.HostGames; paths: {train game seed: [commands]}

The mirror of asct_jax.rl.warm_start for games played on the host, with the same losses
and update (sft_loss, value_fit_loss, make_update, one Adam step on warm_start.batch
sampled turns per step). What differs is the data: a host game has no scripted expert
for arbitrary states, only a fixed path per game, so the episodes are the paths played
noise-free (`expert_rollout`: the path's command is forced at every turn, made a
candidate when the candidate rule dropped it) and SFT trains on every turn of them. The
value head is then fitted on `warm_start.episodes` episodes the warm actor plays on
training games (return-to-go, ppo.gamma).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from asct_jax.rl.host_rollout import _play, concat_rollouts, host_rollout
from asct_jax.rl.train_step import join_params, split_params
from asct_jax.rl.build import build_policy
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.rl.types import Rollout
from asct_jax.rl.warm_start import _fit, fit_value_head, make_update, sft_loss, sft_steps


def expert_rollout(policy, params, source, paths: Dict[int, Sequence[str]], key
                   ) -> Tuple[Rollout, jax.Array]:
    """The paths played on source's training games, len(source.train_env) at a time.

    Returns (rollout [N, T, ...], expert [N, T] bool: the turns that played the path's
    command). N = len(paths) rounded up to whole chunks (the last chunk repeats a path).
    """
    env, chunk = source.train_env, len(source.train_env)
    seeds = sorted(paths)
    seeds += seeds[:(-len(seeds)) % chunk]
    parts, masks = [], []
    for c0 in range(0, len(seeds), chunk):
        part = seeds[c0:c0 + chunk]
        states, steps = env.reset(part)
        path = {i: list(paths[s]) for i, s in enumerate(part)}

        def force(states, path=path):
            return [path[i][s.turn] if s.turn < len(path[i]) else None
                    for i, s in enumerate(states)]
        batch, _, forced = _play(policy, params, env, source.tokenizer, states,
                                 [ts.info for ts in steps], 1, source.host_shape,
                                 key=jax.random.fold_in(key, c0), greedy=True,
                                 encoder=source.encoder, select=source.games.select,
                                 force=force)
        parts.append(batch)
        masks.append(forced)
    return concat_rollouts(parts), jnp.asarray(np.concatenate(masks))


def host_warm_start(run: RunConfig, source, paths: Dict[int, Sequence[str]]
                    ) -> Tuple[Any, Dict[str, float]]:
    """SFT on the expert paths, then the value head (module doc). Returns (params, info)
    like asct_jax.rl.warm_start.warm_start. Keys: fold_in(key(warm_start.seed), 1..4)."""
    run = run_config(run)
    ws = run.warm_start
    steps = sft_steps(run)
    policy, params = build_policy(run, source.vocab_size, source.shape, source.prompt)
    params, frozen = split_params(params)
    key = jax.random.key(ws.seed)
    k_data, k_sft, k_roll, k_value = (jax.random.fold_in(key, i) for i in range(1, 5))

    data, expert = expert_rollout(policy, join_params(params, frozen), source, paths, k_data)
    adam = optax.adam(ws.lr)
    sft = make_update(policy, sft_loss, adam)
    params, sft_first, sft_last = _fit(sft, params, adam.init(params), data, expert, None,
                                       k_sft, steps, ws.batch,
                                       frozen)

    rc, n_env = run.rollout, len(source.train_env)
    played = []
    for c0 in range(0, int(ws.episodes), n_env):
        rng = np.random.default_rng([int(ws.seed), c0])
        seeds = [int(s) for s in rng.choice(source.games.num_train, rc.num_groups,
                                            replace=False)]
        batch, _ = host_rollout(policy, join_params(params, frozen), source.train_env,
                                source.tokenizer, seeds, source.host_shape,
                                group_size=rc.group_size, key=jax.random.fold_in(k_roll, c0),
                                encoder=source.encoder, select=source.games.select)
        played.append(batch)
    played = concat_rollouts(played)
    params, v_first, v_last = fit_value_head(policy, params, played, adam, k_value, run,
                                             frozen)
    info = {"sft_loss_first": sft_first, "sft_loss_last": sft_last,
            "value_loss_first": v_first, "value_loss_last": v_last,
            "expert_turns": int(jnp.sum(expert)),
            "expert_success": float(jnp.mean(data.final_info["success"])),
            "value_fit_success": float(jnp.mean(played.final_info["success"]))}
    return params, info


def paths_of(gold_paths: List[dict]) -> Dict[int, List[str]]:
    """{seed: commands} of the winning paths of a gold-path list (scienceworld_run's JSON)."""
    return {int(g["seed"]): list(g["commands"]) for g in gold_paths if g["won"]}
