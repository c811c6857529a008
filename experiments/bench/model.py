"""Benchmark: tokens/s of batched `generate` and `score`, ours (JAX) vs transformers' PyTorch model.

Same weights, same machine, one process. Compile time (first call minus steady state) is
reported apart from the steady-state time (median over `repeats` calls). The train_pass
mode's passes are experiments/bench/model_train_pass.py. The options are the fields of
experiments/configs/bench/model.py, whose arg picks the mode ("", train_pass, rollout).

  python -m experiments.bench.model "--config.models=('tiny', 'smollm2-135m')" \
      "--config.batch_sizes=(1, 4)" --config.out=results/bench/model.json

policy_scoring adds the policy's constrained candidate scoring (Policy.candidate_log_probs:
N observations x K candidates of A tokens, log-probs from the hidden states and the
LM-head rows of the candidates' tokens) beside the dense reference it replaced (full
[N K A V] logits, a one-hot [K, A, V] trie mask per action and a masked softmax), in
candidate tokens per second, at the model's own vocabulary.

train_pass times the training pass instead of generate / score: forward + backward
(jax.jit(jax.value_and_grad(loss)) on the params from nnx.split; torch: loss.backward(),
torch threads = the cores unless torch_threads) at train_shape [B, S], loss = mean
next-token cross-entropy of the LM logits. Ours also in bfloat16 compute, and the policy's
constrained scoring pass (value_and_grad of the sum of Policy.action_log_probs over N
observations of O tokens, actions of A tokens, K candidates; default N O A K = 8 112 16 8,
so N (O + A) = 1024 tokens, as [8, 128]). Compile time (lower + compile) is reported apart
from the steady state. FLOP/s: 6 * params * tokens (the tied embedding counted once, as the
LM head; the policy pass, which forms no [.., V] logits: 6 * (params - V H) * tokens;
attention scores not counted) and XLA's cost analysis, beside the machine's jitted
[2048, 2048] x [2048, 2048] float32 matmul (and torch's, and both in bfloat16). Torch's
model is also timed in bfloat16 (a copy). After one first call each, all these passes run
in `repeats` interleaved rounds, so that each sees the same machine load; torch's bfloat16
passes get their own rounds after the others (once oneDNN has run its AMX bfloat16 kernels
in the process, our passes spend 1.5-4 s more a pass in the kernel; `system_s` in the rows).
On a shared machine run it with OMP_WAIT_POLICY=PASSIVE: with libgomp's default spin-wait
torch's 2 threads lose whole scheduler slices at every barrier once another process holds
a core (tiny: 1.3 s a pass instead of 46 ms; 1 thread: 36 ms). XLA does not use OpenMP.

  OMP_WAIT_POLICY=PASSIVE python -m experiments.bench.model \
      --config experiments/configs/bench/model.py:train_pass

rollout times generation at a rollout's shapes instead (issue 23): SmolLM2-135M, batch 8
and 32, ragged left-padded prompts of real text (3P/4 to P tokens, P = 256; one row full),
64 new tokens sampled at temperature 1, ours (models.generate, jitted while_loop) vs
transformers' `generate` (DynamicCache, do_sample, top_k 0) on the same weights, torch threads
= the cores. Each side's prompt pass is also timed alone (ours: the jitted `generate.prefill`,
the first part of the same program; torch: one forward with logits_to_keep=1), so the
split prefill / decode = prefill / (whole - prefill). Compile time apart (first call minus
the steady median), `repeats` interleaved rounds. Then a greedy cross-check: ours and
torch's greedy tokens on the first `check_rows` rows (identical prefix per row).

  OMP_WAIT_POLICY=PASSIVE python -m experiments.bench.model \
      --config experiments/configs/bench/model.py:rollout
"""
from __future__ import annotations

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
from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from experiments.bench.model_train_pass import bench_train_pass, policy_inputs

CONFIG = "experiments/configs/bench/model.py"


def to_hf_llama(cfg: models.ModelConfig):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                       num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                       num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                       max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.rms_norm_eps,
                       rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
                       tie_word_embeddings=cfg.tie_embeddings, attention_bias=cfg.qkv_bias)


def load_pair(name: str, bf16: bool = False):
    """(our Decoder, torch model, our bfloat16 Decoder or None) with identical weights."""
    from transformers import LlamaConfig, LlamaForCausalLM
    load = lambda path: (models.load_pretrained(path)[0],
                         models.load_pretrained(path, dtype="bfloat16")[0] if bf16 else None)
    if name == "smollm2-135m":
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
        path = models.smollm2_gguf_path()
        ours, ours_bf16 = load(path)
        config = {k: v for k, v in load_gguf_checkpoint(path)["config"].items() if k != "model_type"}
        ref = LlamaForCausalLM(LlamaConfig(**config)).eval()
        ref.load_state_dict(load_gguf_checkpoint(path, return_tensors=True, model_to_load=ref)["tensors"],
                            strict=False)
        ref.tie_weights()
        return ours, ref, ours_bf16
    ref = LlamaForCausalLM(to_hf_llama(models.get_preset(name))).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours, ours_bf16 = load(tmp)
    return ours, ref, ours_bf16


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


def rollout_prompts(tokenizer, batch: int, prompt_len: int, seed: int = 0):
    """[B, P] int32 ids and mask: windows of real text (the repository's docs, tokenized),
    row lengths drawn uniformly in [3P/4, P], left-padded with 0 (mask False) to P."""
    import glob
    text = "\n\n".join(open(f).read() for f in sorted(glob.glob("docs/**/*.md", recursive=True)))
    ids = np.asarray(tokenizer(text)["input_ids"], np.int32)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3 * prompt_len // 4, prompt_len + 1, batch)
    lengths[0] = prompt_len   # one full row
    prompt, mask = np.zeros((batch, prompt_len), np.int32), np.zeros((batch, prompt_len), bool)
    for r, n in enumerate(lengths):
        start = rng.integers(0, len(ids) - n)
        prompt[r, prompt_len - n:], mask[r, prompt_len - n:] = ids[start:start + n], True
    return prompt, mask


def bench_rollout(name, ours, ref, tokenizer, args):
    """Generation at rollout shapes (see rollout): ours vs torch's `generate`, same prompts.

    Per batch size: sampling at temperature 1, top_p 1 (ours: models.generate; torch:
    generate(do_sample=True, top_k=0), DynamicCache), and each side's prompt pass alone (ours:
    the jitted `generate.prefill`, torch: one forward with logits_to_keep=1), so decode = whole
    - prefill. One first call each (ours: compile + run), then `repeats` interleaved rounds
    (median). New tokens / s count batch * new_tokens over the whole call, prefill included
    (no row stops: no stop tokens, torch with min_new_tokens). Then the greedy cross-check: both
    sides' greedy tokens on the first `check_rows` rows of the smallest batch."""
    import importlib
    import jax.numpy as jnp
    from flax import nnx
    gen_lib = importlib.import_module("asct_jax.models.generate")
    n_new, p_len = args.new_tokens, args.prompt_len
    graphdef, state = nnx.split(ours)
    prefill_jit = jax.jit(lambda s, ids, m: gen_lib.prefill(nnx.merge(graphdef, s), ids, m, n_new)[1])
    key = jax.random.key(0)
    rows = []
    for batch in args.batch_sizes:
        prompt, pmask = rollout_prompts(tokenizer, batch, p_len)
        ids_j, mask_j = jnp.asarray(prompt), jnp.asarray(pmask)
        x, xm = torch.as_tensor(prompt, dtype=torch.long), torch.as_tensor(pmask, dtype=torch.long)

        def ours_gen():
            return models.generate(ours, ids_j, mask_j, key, max_new_tokens=n_new,
                                   temperature=1.0).tokens.block_until_ready()

        def torch_gen():
            with torch.no_grad():
                return ref.generate(x, attention_mask=xm, max_new_tokens=n_new, min_new_tokens=n_new,
                                    do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                    eos_token_id=None, pad_token_id=0)

        def torch_prefill():
            with torch.no_grad():
                pos = (xm.cumsum(-1) - 1).clamp(min=0)
                return ref(x, attention_mask=xm, position_ids=pos, use_cache=True, logits_to_keep=1).logits

        calls = dict(jax_generate=ours_gen, jax_prefill=lambda: prefill_jit(state, ids_j, mask_j).block_until_ready(),
                     torch_generate=torch_gen, torch_prefill=torch_prefill)
        first, times = {}, {k: [] for k in calls}
        for k, fn in calls.items():
            t = time.perf_counter()
            fn()
            first[k] = time.perf_counter() - t
        for _ in range(args.repeats):
            for k, fn in calls.items():
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        r = dict(model=name, op="rollout_generate", batch=batch, prompt_len=p_len,
                 prompt_tokens=int(pmask.sum()), new_tokens=n_new, temperature=1.0,
                 times_s=times, first_s=first, steady_s=med, load_1min=os.getloadavg()[0])
        for impl in ("jax", "torch"):
            whole, pre = med[f"{impl}_generate"], med[f"{impl}_prefill"]
            r[f"{impl}_tokens_per_s"] = batch * n_new / whole
            r[f"{impl}_decode_tokens_per_s"] = batch * n_new / max(whole - pre, 1e-9)
            r[f"{impl}_prefill_share"] = pre / whole
        r["speed_vs_torch"] = statistics.median(t / o for o, t in zip(times["jax_generate"], times["torch_generate"]))
        r["jax_compile_s"] = max(first["jax_generate"] - med["jax_generate"], 0.0)
        r["jax_prefill_compile_s"] = max(first["jax_prefill"] - med["jax_prefill"], 0.0)
        rows.append(r)
        print(f"{name} B={batch} P={p_len} ({r['prompt_tokens']} real prompt tokens) N={n_new}: "
              f"ours {r['jax_tokens_per_s']:.1f} tok/s ({med['jax_generate']:.2f} s, prefill "
              f"{med['jax_prefill']:.2f} s = {r['jax_prefill_share']:.0%}, decode {r['jax_decode_tokens_per_s']:.1f} "
              f"tok/s, compile {r['jax_compile_s']:.1f} s + prefill-only {r['jax_prefill_compile_s']:.1f} s) | "
              f"torch {r['torch_tokens_per_s']:.1f} tok/s ({med['torch_generate']:.2f} s, prefill "
              f"{med['torch_prefill']:.2f} s = {r['torch_prefill_share']:.0%}, decode "
              f"{r['torch_decode_tokens_per_s']:.1f} tok/s) | ours / torch {r['speed_vs_torch']:.2f}x "
              f"(of the medians {med['torch_generate'] / med['jax_generate']:.2f}x)  load {r['load_1min']:.2f}",
              flush=True)

    # Greedy cross-check on the first rows of the smallest batch (ragged, left-padded).
    prompt, pmask = rollout_prompts(tokenizer, min(args.batch_sizes), p_len)
    prompt, pmask = prompt[:args.check_rows], pmask[:args.check_rows]
    ours_tok = np.asarray(models.generate(ours, prompt, pmask, key, max_new_tokens=n_new, greedy=True).tokens)
    with torch.no_grad():
        x = torch.as_tensor(prompt, dtype=torch.long)
        ref_tok = ref.generate(x, attention_mask=torch.as_tensor(pmask, dtype=torch.long), max_new_tokens=n_new,
                               min_new_tokens=n_new, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[:, p_len:].numpy()
    agree = [int(np.argmin(o == t)) if (o != t).any() else n_new for o, t in zip(ours_tok, ref_tok)]
    print(f"{name} greedy cross-check, {len(agree)} rows x {n_new} new tokens: identical prefix per row {agree}"
          f"; row 0: {tokenizer.decode(ours_tok[0][:agree[0]])!r}", flush=True)
    rows.append(dict(model=name, op="rollout_greedy_check", rows=len(agree), new_tokens=n_new,
                     identical_prefix=agree, all_identical=bool(all(a == n_new for a in agree))))
    return rows


def dense_candidate_log_probs(model, obs, cands, legal):
    """The replaced path (same shared-prefix KV cache as the policy): full [N K A V] logits
    of every candidate, a one-hot [K, A, V] trie mask per action, masked softmax."""
    import jax.numpy as jnp
    from asct_jax.models.cache import init_cache, repeat
    from asct_jax.rl.padding import left_align
    from asct_jax.rl.policy import allowed_tokens, constrained_log_probs
    n, k, a = cands.shape
    prefix = left_align(obs)
    cache = init_cache(model.config, n, prefix.shape[1] + a - 1)
    logits0, _, cache = model.forward(prefix, attention_mask=prefix != 0, cache=cache)
    cache = repeat(cache, k)
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
    graphdef, params = nnx.split(ours)
    policy, obs, cands, legal = policy_inputs(ours, graphdef, n, k, a, o)
    v = ours.config.vocab_size
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


def main(config):
    """Runs the benchmark of `config` (experiments/configs/bench/model.py)."""
    args = config.copy_and_resolve_references()
    args.out = args.out or (f"results/bench/model{'_train' if args.train_pass else ''}"
                            f"{'_rollout' if args.rollout else ''}.json")
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    elif args.train_pass or args.rollout:
        torch.set_num_threads(len(os.sched_getaffinity(0)))

    env = dict(jax=jax.__version__, torch=torch.__version__, backend=jax.default_backend(),
               devices=[str(d) for d in jax.devices()], torch_threads=torch.get_num_threads(),
               cpu_count=os.cpu_count(), machine=platform.platform(), load_1min=os.getloadavg()[0],
               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"))
    print(json.dumps(env))
    rows = []
    for name in args.models:
        ours, ref, ours_bf16 = load_pair(name, bf16=args.train_pass)
        if args.train_pass:
            rows += bench_train_pass(name, ours, ref, ours_bf16, args)
        elif args.rollout:
            path = models.smollm2_gguf_path() if name == "smollm2-135m" else None
            if path is None:
                raise ConfigError("models", f"rollout needs a model with a tokenizer, got {name!r}",
                                  "smollm2-135m")
            from asct_jax.models.loading import load_tokenizer
            rows += bench_rollout(name, ours, ref, load_tokenizer(path), args)
        else:
            for batch in args.batch_sizes:
                rows += bench_one(name, ours, ref, batch, args)
        if args.policy_scoring:
            rows += bench_policy_scoring(name, ours, args)
        del ours, ref, ours_bf16
    out = dict(env=env, settings=config_cli.config_to_dict(args), results=rows)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
