"""Benchmark: tokens/s of batched `generate` and `score`, ours (JAX) vs transformers' PyTorch model.

Same weights, same machine, one process. Compile time (first call minus steady state) is
reported apart from the steady-state time (median over --repeats calls).

  python experiments/bench_model.py --models tiny smollm2-135m --batch-sizes 1 4 --out results/bench/model.json

--policy-scoring adds the policy's constrained candidate scoring (Policy.candidate_log_probs:
N observations x K candidates of A tokens, log-probs from the hidden states and the
LM-head rows of the candidates' tokens) beside the dense reference it replaced (full
[N K A V] logits, a one-hot [K, A, V] trie mask per action and a masked softmax), in
candidate tokens per second, at the model's own vocabulary.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import jax
import numpy as np
import torch

from asct_jax import models


def to_hf_llama(cfg: models.ModelConfig):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                       num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                       num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                       max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.rms_norm_eps,
                       rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
                       tie_word_embeddings=cfg.tie_embeddings, attention_bias=cfg.qkv_bias)


def load_pair(name: str):
    """(our Decoder, torch model) with identical weights."""
    from transformers import LlamaConfig, LlamaForCausalLM
    if name == "smollm2-135m":
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
        path = models.smollm2_gguf_path()
        ours, _ = models.load_pretrained(path)
        config = {k: v for k, v in load_gguf_checkpoint(path)["config"].items() if k != "model_type"}
        ref = LlamaForCausalLM(LlamaConfig(**config)).eval()
        ref.load_state_dict(load_gguf_checkpoint(path, return_tensors=True, model_to_load=ref)["tensors"],
                            strict=False)
        ref.tie_weights()
        return ours, ref
    ref = LlamaForCausalLM(to_hf_llama(models.get_preset(name))).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours, _ = models.load_pretrained(tmp)
    return ours, ref


def timed(fn, repeats: int):
    """(first call seconds, median of `repeats` further calls)."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times)


def bench_one(name, ours, ref, batch, args):
    rng = np.random.default_rng(0)
    v = ours.config.vocab_size
    prompt = rng.integers(3, v, (batch, args.prompt_len)).astype(np.int32)
    cont = rng.integers(3, v, (batch, args.cont_len)).astype(np.int32)
    pmask, cmask = np.ones_like(prompt, bool), np.ones_like(cont, bool)
    key = jax.random.key(0)
    n_gen, n_score = batch * args.new_tokens, batch * (args.prompt_len + args.cont_len)
    rows = []

    def row(op, impl, first, steady, n_tokens):
        r = dict(model=name, op=op, impl=impl, batch=batch, tokens=n_tokens, steady_s=steady,
                 tokens_per_s=n_tokens / steady, compile_s=max(first - steady, 0.0) if impl == "jax" else None)
        rows.append(r)
        comp = f"{r['compile_s']:.2f}s" if r["compile_s"] is not None else "-"
        print(f"{name:14s} {op:8s} {impl:6s} B={batch:<3d} {r['tokens_per_s']:10.1f} tok/s  "
              f"steady {steady * 1e3:9.1f} ms  compile {comp}", flush=True)

    gen = lambda: models.generate(ours, prompt, pmask, key, max_new_tokens=args.new_tokens,
                                  temperature=1.0).tokens.block_until_ready()
    row("generate", "jax", *timed(gen, args.repeats), n_gen)
    sc = lambda: models.score(ours, prompt, pmask, cont, cmask).block_until_ready()
    row("score", "jax", *timed(sc, args.repeats), n_score)
    if args.no_torch:
        return rows
    x = torch.as_tensor(prompt, dtype=torch.long)
    full = torch.as_tensor(np.concatenate([prompt, cont], 1), dtype=torch.long)

    def torch_gen():
        with torch.no_grad():
            ref.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.new_tokens,
                         min_new_tokens=args.new_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                         eos_token_id=None, pad_token_id=0)

    def torch_score():
        with torch.no_grad():
            logits = ref(full).logits[:, args.prompt_len - 1:-1]
            torch.log_softmax(logits.float(), -1).gather(-1, full[:, args.prompt_len:, None])

    row("generate", "torch", *timed(torch_gen, args.repeats), n_gen)
    row("score", "torch", *timed(torch_score, args.repeats), n_score)
    return rows


def dense_candidate_log_probs(model, obs, cands, legal):
    """The replaced path (same shared-prefix KV cache as the policy): full [N K A V] logits
    of every candidate, a one-hot [K, A, V] trie mask per action, masked softmax."""
    import jax.numpy as jnp
    from asct_jax.models.cache import init_cache
    from asct_jax.rl.policy import allowed_tokens, constrained_log_probs, left_align
    n, k, a = cands.shape
    prefix = left_align(obs)
    cache = init_cache(model.config, n, prefix.shape[1] + a - 1)
    logits0, _, cache = model.forward(prefix, attention_mask=prefix != 0, cache=cache)
    cache = jax.tree.map(lambda x: jnp.repeat(x, k, axis=0) if x.ndim else x, cache)
    flat = cands.reshape(n * k, a)
    rest, _, _ = model.forward(flat[:, :-1], attention_mask=jnp.ones_like(flat[:, :-1], bool),
                               cache=cache)
    logits = jnp.concatenate([jnp.repeat(logits0[:, -1:], k, axis=0), rest], axis=1)
    allowed = jax.vmap(allowed_tokens, in_axes=(0, 0, 0, None))(
        flat, jnp.repeat(cands, k, axis=0), jnp.repeat(legal, k, axis=0), model.config.vocab_size)
    logp, _ = jax.vmap(constrained_log_probs)(logits.astype(jnp.float32), allowed, flat)
    return logp.reshape(n, k, a)


def bench_policy_scoring(name, ours, args, n=16, k=8, a=8, o=48):
    """Candidate tokens/s of Policy.candidate_log_probs vs the dense reference."""
    import jax.numpy as jnp
    from flax import nnx
    from asct_jax.rl.policy import Policy
    graphdef, params = nnx.split(ours)
    policy = Policy(graphdef, ours.config.vocab_size, o, a, 0)
    rng = np.random.default_rng(1)
    v = ours.config.vocab_size
    obs = jnp.asarray(rng.integers(5, v, (n, o)), jnp.int32)
    cands = jnp.asarray(rng.integers(5, 9, (n, k, a)), jnp.int32)   # shared prefixes
    legal = jnp.ones((n, k), bool)
    ours_fn = jax.jit(lambda p: policy.candidate_log_probs(p, obs, cands, legal)[1])
    dense_fn = jax.jit(lambda p: dense_candidate_log_probs(nnx.merge(graphdef, p), obs, cands, legal))
    rows = []
    for impl, fn in (("candidate_rows", ours_fn), ("dense_reference", dense_fn)):
        first, steady = timed(lambda: fn(params).block_until_ready(), args.repeats)
        r = dict(model=name, op="policy_scoring", impl=impl, batch=n, tokens=n * k * a,
                 steady_s=steady, tokens_per_s=n * k * a / steady,
                 compile_s=max(first - steady, 0.0), shape=dict(n=n, k=k, a=a, o=o, v=v))
        rows.append(r)
        print(f"{name:14s} scoring  {impl:15s} N={n} K={k} A={a} O={o} V={v}: "
              f"{r['tokens_per_s']:10.1f} cand tok/s  steady {steady * 1e3:9.1f} ms", flush=True)
    err = float(jnp.max(jnp.abs(ours_fn(params) - dense_fn(params))))
    print(f"{name:14s} scoring  max |candidate_rows - dense_reference| = {err:.2e}", flush=True)
    for r in rows:
        r["max_abs_diff"] = err
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--cont-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--policy-scoring", action="store_true",
                        help="also time the policy's constrained candidate scoring")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads (0: torch's default). On a busy machine 1 is steadier.")
    parser.add_argument("--out", default="results/bench/model.json")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    env = dict(jax=jax.__version__, torch=torch.__version__, backend=jax.default_backend(),
               devices=[str(d) for d in jax.devices()], torch_threads=torch.get_num_threads(),
               cpu_count=os.cpu_count(), machine=platform.platform())
    print(json.dumps(env))
    rows = []
    for name in args.models:
        ours, ref = load_pair(name)
        for batch in args.batch_sizes:
            rows += bench_one(name, ours, ref, batch, args)
        if args.policy_scoring:
            rows += bench_policy_scoring(name, ours, args)
        del ours, ref
    out = dict(env=env, settings=vars(args), results=rows)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
