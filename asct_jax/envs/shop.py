"""`shop`: a WebShop-like analogue (not WebShop): search, click item, click option, buy.

The instruction names a target category, feature, colour, size and a price cap:
"find a leather bag in red size large under 50 dollars". Each episode draws a catalogue
with the target item, near-miss decoys (over the cap, missing the colour, other feature,
other category) and random items; the catalogue order (and so the item ids p1, p2, ...)
is shuffled.

Pages and candidates (K fixed slots; their text depends on the page):
  search  : Q query slots "search for {feature} {category}" (the right one among Q)
  results : "click on the {pid} item" x3, "next page", "back to search"
  item    : "select color {c}" x NC, "select size {s}" x NS, "buy it now",
            "go back to results"

Reward (WebShop-style, given once at "buy", which ends the episode; 0 otherwise):
  r = r_type * (1[feature] + 1[colour] + 1[size] + 1[price <= cap]) / 4,
  r_type = 1 if the category matches else 0.1.  score = r, success = 1[r == 1].
  (small config: no size attribute, the mean is over 3 attributes; see SETTINGS.)
Credit: the query and the option clicks pay off only at "buy"; clicking a wrong item is
recoverable ("go back"), buying it is not.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID, Environment, TimeStep

CATEGORIES = ("shirt", "shoes", "bag", "hat", "watch", "jacket")
FEATURES = ("cotton", "leather", "wool", "canvas", "vintage", "waterproof")
COLORS = ("red", "blue", "black", "white")
SIZES = ("small", "medium", "large")
PRICES = tuple(str(10 * i) for i in range(1, 10))      # price index 0..8 -> "10".."90"
MAX_ITEMS = 20
ITEM_IDS = tuple(f"p{i}" for i in range(1, MAX_ITEMS + 1))
PER_PAGE = 3
DECOYS = ("cap", "color", "feature", "category")   # planted near-miss decoys, items 1..4
# Per-size settings: categories, features, colours and sizes in play (NS = 0: the task has
# no size attribute and the reward averages 3 attributes), catalogue size, query slots Q
# (= K, at least NC + NS + 2), turn budget, probability that an item offers an option.
SETTINGS = {
    # small: 3 categories x 2 features, 5 query slots, colour only (no size), 5 items with
    # two near-miss decoys (over the cap, no target colour), the query is final (no
    # "back to search"), "buy" needs a colour chosen.
    "small": dict(NCAT=3, NFEAT=2, NC=2, NS=0, n_items=5, Q=5, max_turns=10, p_option=0.5,
                  buy_needs_options=True, can_research=False, decoys=("cap", "color")),
    "hard": dict(NCAT=6, NFEAT=6, NC=4, NS=3, n_items=20, Q=12, max_turns=12, p_option=0.5,
                 buy_needs_options=False, can_research=True, decoys=DECOYS),
}


def vocabulary():
    return C.words_of("find a in size under dollars", "page search results : item price",
                      "colors sizes chosen", "search for", "click on the item", "next page",
                      "back to search", "select color", "select size", "buy it now",
                      "go back to results", "results for", "you open", "color set to",
                      "size set to", "next page of results", "you bought", "nothing left",
                      ) | set(CATEGORIES + FEATURES + COLORS + SIZES + PRICES + ITEM_IDS)


@dataclasses.dataclass(frozen=True)
class ShopConfig:
    size: str = "small"            # "small" | "hard"
    max_turns: int = 0             # 0 -> size default (small 10, hard 12)

    def __post_init__(self):
        C.check_choice("size", self.size, ("small", "hard"))


@chex.dataclass(frozen=True)
class ShopParams:
    p_option: chex.Array           # [] probability that a random item offers an option
    buy_needs_options: chex.Array  # [] bool: "buy it now" is legal only once every option
                                   # of the task (colour, size) has been selected
    can_research: chex.Array       # [] bool: "back to search" is legal on the results page


@chex.dataclass(frozen=True)
class ShopState:
    key: chex.PRNGKey
    turn: chex.Array               # [] int32
    done: chex.Array               # [] bool
    page: chex.Array               # [] int32 0 search, 1 results, 2 item
    queries: chex.Array            # [Q, 2] int32 (category, feature) of each query slot
    order: chex.Array              # [n] int32 result ranking of the last search
    offset: chex.Array             # [] int32 results page number
    cur: chex.Array                # [] int32 open item
    color: chex.Array              # [] int32 chosen colour or -1
    size: chex.Array               # [] int32 chosen size or -1
    cat: chex.Array                # [n] int32
    feat: chex.Array               # [n] int32
    price: chex.Array              # [n] int32 price index
    colors: chex.Array             # [n, NC] bool
    sizes: chex.Array              # [n, NS] bool
    noise: chex.Array              # [n] float32 ranking tie-break
    goal: chex.Array               # [5] int32 cat, feat, colour, size, cap index
    target: chex.Array             # [] int32 the planted target item
    score: chex.Array              # [] float32 reward at buy (0 before)


class Shop(C.TextEnvMixin, Environment):
    name = "shop"

    def __init__(self, config: ShopConfig = ShopConfig()):
        self.config = config
        sz = SETTINGS[config.size]
        self.NCAT, self.NFEAT, self.NC, self.NS = sz["NCAT"], sz["NFEAT"], sz["NC"], sz["NS"]
        self.n_items, self.Q, self.p_option = sz["n_items"], sz["Q"], sz["p_option"]
        self.buy_needs_options, self.can_research = sz["buy_needs_options"], sz["can_research"]
        self.decoys = tuple(sz["decoys"])
        assert self.Q >= max(self.NC + self.NS + 2, PER_PAGE + 2) and self.n_items >= 5
        assert self.Q <= self.NCAT * self.NFEAT and self.NC >= 2
        self.num_actions = self.Q
        self.action_len = 6
        self.obs_len = 56
        self.feedback_len = 8
        self.max_turns = config.max_turns or sz["max_turns"]
        self._init_text()
        A, NC, NS = self.action_len, self.NC, self.NS
        cats, feats = CATEGORIES[: self.NCAT], FEATURES[: self.NFEAT]
        self.t_search = C.encode_table([f"search for {f} {c}" for c in cats for f in feats],
                                       A, eos=True)
        self.t_click = C.encode_table([f"click on the {p} item" for p in ITEM_IDS[: self.n_items]],
                                      A, eos=True)
        nav = C.encode_table(["next page", "back to search"], A, eos=True)
        colors, sizes = COLORS[:NC], SIZES[:NS]
        item_rows = ([f"select color {c}" for c in colors] + [f"select size {s}" for s in sizes]
                     + ["buy it now", "go back to results"])
        t_item = C.encode_table(item_rows, A, eos=True)
        self.t_nav = nav
        self.t_item = np.concatenate([t_item, np.zeros((self.Q - len(item_rows), A), np.int32)])
        wid = lambda w: int(C.encode(w, 1)[0])
        self.w_cat = np.asarray([wid(c) for c in cats], np.int32)
        self.w_feat = np.asarray([wid(f) for f in feats], np.int32)
        self.w_color = np.asarray([wid(c) for c in colors], np.int32)
        self.w_size = np.asarray([wid(s) for s in SIZES], np.int32)     # all (NS may be 0)
        self.w_price = np.asarray([wid(p) for p in PRICES], np.int32)
        self.w_pid = np.asarray([wid(p) for p in ITEM_IDS[: self.n_items]], np.int32)
        self.w = {w: wid(w) for w in ("find", "a", "in", "size", "under", "dollars", "page",
                                      "search", "results", ":", "item", "price", "colors",
                                      "sizes", "chosen", "for", "you", "open", "color", "set",
                                      "to", "next", "of", "back", "bought")}
        self.f_nothing = C.encode(C.NOTHING_TEXT, self.feedback_len)
        self._freeze_tables()

    # ------------------------------------------------------------------ protocol
    def default_params(self) -> ShopParams:
        return ShopParams(p_option=jnp.asarray(self.p_option, jnp.float32),
                          buy_needs_options=jnp.asarray(self.buy_needs_options),
                          can_research=jnp.asarray(self.can_research))

    def reset(self, key, params) -> Tuple[ShopState, TimeStep]:
        n, NCAT, NF, NC, NS = self.n_items, self.NCAT, self.NFEAT, self.NC, self.NS
        key, *ks = jax.random.split(key, 17)
        gc = jax.random.randint(ks[0], (), 0, NCAT)
        gf = jax.random.randint(ks[1], (), 0, NF)
        gcol = jax.random.randint(ks[2], (), 0, NC)
        gsz = jax.random.randint(ks[3], (), 0, max(NS, 1))
        cap = jax.random.randint(ks[4], (), 2, 8)          # "30".."80"
        cat = jax.random.randint(ks[5], (n,), 0, NCAT)
        feat = jax.random.randint(ks[6], (n,), 0, NF)
        price = jax.random.randint(ks[7], (n,), 0, 9)
        colors = jax.random.bernoulli(ks[8], params.p_option, (n, NC))
        sizes = jax.random.bernoulli(ks[9], params.p_option, (n, NS))
        ok_price = jax.random.randint(ks[10], (5,), 0, cap + 1)
        other = jax.random.randint(ks[11], (2,), 1, max(NCAT, NF))
        # Planted items: 0 target, 1 over the cap, 2 no target colour, 3 other feature,
        # 4 other category.
        cat0, feat0, price0, colors0, sizes0 = cat, feat, price, colors, sizes
        cat = cat.at[:4].set(gc).at[4].set((gc + 1 + other[0] % (NCAT - 1)) % NCAT)
        feat = feat.at[:3].set(gf).at[3].set((gf + 1 + other[1] % (NF - 1)) % NF).at[4].set(gf)
        price = price.at[:5].set(ok_price).at[1].set(jnp.minimum(cap + 1 + ok_price[1] % 2, 8))
        colors = colors.at[:5, gcol].set(True).at[2, gcol].set(False)
        if NS:
            sizes = sizes.at[:5, gsz].set(True)
        # Decoy kinds not in play stay random items.
        rnd = np.asarray([False] + [k not in self.decoys for k in DECOYS]
                         + [True] * (n - 5))
        cat, feat, price = (jnp.where(rnd, a0, a) for a0, a in ((cat0, cat), (feat0, feat),
                                                                (price0, price)))
        colors = jnp.where(rnd[:, None], colors0, colors)
        sizes = jnp.where(rnd[:, None], sizes0, sizes)
        colors = colors.at[:, (gcol + 1) % NC].set(True)   # every item offers some colour
        if NS:
            sizes = sizes.at[:, (gsz + 1) % NS].set(True)
        perm = jax.random.permutation(ks[12], n)
        target = jnp.argsort(perm)[0]
        # Q query slots: the right (category, feature) pair plus Q-1 other pairs, shuffled.
        goal_pair = gc * NF + gf
        u = jax.random.uniform(ks[14], (NCAT * NF,)).at[goal_pair].set(2.0)
        queries = jnp.concatenate([jnp.argsort(u)[: self.Q - 1], goal_pair[None]])
        queries = jax.random.permutation(ks[13], queries)
        queries = jnp.stack([queries // NF, queries % NF], -1)
        state = ShopState(
            key=key, turn=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool),
            page=jnp.zeros((), jnp.int32), queries=queries.astype(jnp.int32),
            order=jnp.arange(n, dtype=jnp.int32), offset=jnp.zeros((), jnp.int32),
            cur=jnp.zeros((), jnp.int32), color=jnp.asarray(-1, jnp.int32),
            size=jnp.asarray(-1, jnp.int32),
            cat=cat[perm].astype(jnp.int32), feat=feat[perm].astype(jnp.int32),
            price=price[perm].astype(jnp.int32), colors=colors[perm], sizes=sizes[perm],
            noise=jax.random.uniform(ks[15], (n,)),
            goal=jnp.stack([gc, gf, gcol, gsz, cap]).astype(jnp.int32),
            target=target.astype(jnp.int32), score=jnp.zeros((), jnp.float32))
        return state, C.first_timestep(self, state, params, self.observe, self._info)

    def legal_actions(self, state, params):
        K, A = self.num_actions, self.action_len
        shown = state.order[jnp.clip(state.offset * PER_PAGE + jnp.arange(PER_PAGE), 0,
                                     self.n_items - 1)]
        res = jnp.concatenate([jnp.asarray(self.t_click)[shown], jnp.asarray(self.t_nav),
                               jnp.zeros((K - PER_PAGE - 2, A), jnp.int32)])
        cands = jnp.where(state.page == 0, jnp.asarray(self.t_search)[state.queries[:, 0] * self.NFEAT + state.queries[:, 1]],
                          jnp.where(state.page == 1, res, jnp.asarray(self.t_item)))
        return cands.astype(jnp.int32), legal_mask(state, params)

    def step(self, state, action, params):
        return C.finish_step(self, state, action, params, self._transition, self.observe,
                             self._info, self.f_nothing)

    # ------------------------------------------------------------------ dynamics
    def _transition(self, s: ShopState, idx, rng, params):
        F, NC, NS, w = self.feedback_len, self.NC, self.NS, self.w
        fb = lambda *segs: C.render(segs, F)
        # search page: run query idx
        qc, qf = s.queries[jnp.minimum(idx, self.Q - 1)]
        rel = 2.0 * (s.cat == qc) + 1.0 * (s.feat == qf) + 0.5 * s.noise
        s_search = s.replace(page=jnp.asarray(1, jnp.int32), offset=jnp.zeros((), jnp.int32),
                             order=jnp.argsort(-rel).astype(jnp.int32))
        fb_search = fb([w["results"], w["for"], self.w_feat[qf], self.w_cat[qc]])
        # results page
        item = s.order[jnp.clip(s.offset * PER_PAGE + jnp.minimum(idx, PER_PAGE - 1), 0,
                                self.n_items - 1)]
        s_click = s.replace(page=jnp.asarray(2, jnp.int32), cur=item,
                            color=jnp.asarray(-1, jnp.int32), size=jnp.asarray(-1, jnp.int32))
        fb_click = fb([w["you"], w["open"], self.w_pid[item]])
        s_next = s.replace(offset=s.offset + 1)
        fb_next = fb([w["next"], w["page"], w["of"], w["results"]])
        s_back0 = s.replace(page=jnp.zeros((), jnp.int32))
        fb_back0 = fb([w["back"], w["to"], w["search"]])
        # item page
        c = jnp.clip(idx, 0, NC - 1)
        z = jnp.clip(idx - NC, 0, NS - 1)
        s_color = s.replace(color=c.astype(jnp.int32))
        fb_color = fb([w["color"], w["set"], w["to"], self.w_color[c]])
        s_size = s.replace(size=z.astype(jnp.int32))
        fb_size = fb([w["size"], w["set"], w["to"], self.w_size[z]])
        i, g = s.cur, s.goal
        r_type = jnp.where(s.cat[i] == g[0], 1.0, 0.1)
        match = ((s.feat[i] == g[1]).astype(jnp.float32) + (s.color == g[2])
                 + (s.price[i] <= g[4]))
        if NS:
            match = match + (s.size == g[3])
        r_buy = (r_type * match / (4.0 if NS else 3.0)).astype(jnp.float32)
        s_buy = s.replace(done=jnp.ones((), bool), score=r_buy)
        fb_buy = fb([w["you"], w["bought"], self.w_pid[i]])
        s_back1 = s.replace(page=jnp.asarray(1, jnp.int32))
        fb_back1 = fb([w["back"], w["to"], w["results"]])
        # choose the branch: kind 0 search, 1 click, 2 next, 3 back0, 4 color, 5 size,
        # 6 buy, 7 back1
        kind = jnp.where(s.page == 0, 0, jnp.where(
            s.page == 1, jnp.where(idx < PER_PAGE, 1, jnp.where(idx == PER_PAGE, 2, 3)),
            jnp.where(idx < NC, 4, jnp.where(idx < NC + NS, 5,
                                             jnp.where(idx == NC + NS, 6, 7)))))
        branches = [(s_search, fb_search), (s_click, fb_click), (s_next, fb_next),
                    (s_back0, fb_back0), (s_color, fb_color), (s_size, fb_size),
                    (s_buy, fb_buy), (s_back1, fb_back1)]
        out_s, out_fb = branches[0]
        for k, (bs, bfb) in enumerate(branches[1:], 1):
            out_s = C.tree_select(kind == k, bs, out_s)
            out_fb = jnp.where(kind == k, bfb, out_fb)
        return out_s, out_fb, jnp.where(kind == 6, r_buy, 0.0)

    def observe(self, s: ShopState, params) -> jax.Array:
        """[O] int32: the observation tokens of state `s` (what reset/step return)."""
        w, g = self.w, s.goal
        instr = [w["find"], w["a"], self.w_feat[g[1]], self.w_cat[g[0]], w["in"],
                 self.w_color[g[2]]]
        if self.NS:
            instr += [w["size"], self.w_size[g[3]]]
        instr += [w["under"], self.w_price[g[4]], w["dollars"]]
        pos = s.offset * PER_PAGE + jnp.arange(PER_PAGE)
        shown = s.order[jnp.clip(pos, 0, self.n_items - 1)]
        rows = jnp.stack([jnp.asarray(self.w_pid)[shown], jnp.asarray(self.w_feat)[s.feat[shown]],
                          jnp.asarray(self.w_cat)[s.cat[shown]],
                          jnp.asarray(self.w_price)[s.price[shown]]], 1)
        rows = jnp.where((pos < self.n_items)[:, None], rows, PAD_ID).reshape(-1)
        i = s.cur
        item = jnp.concatenate([
            jnp.asarray([w["item"]]), jnp.asarray(self.w_pid)[i][None],
            jnp.asarray(self.w_feat)[s.feat[i]][None], jnp.asarray(self.w_cat)[s.cat[i]][None],
            jnp.asarray([w["price"]]), jnp.asarray(self.w_price)[s.price[i]][None],
            jnp.asarray([w["colors"]]), jnp.where(s.colors[i], jnp.asarray(self.w_color), PAD_ID),
            jnp.asarray([w["sizes"]]),
            jnp.where(s.sizes[i], jnp.asarray(self.w_size)[: self.NS], PAD_ID),
            jnp.asarray([w["chosen"]]),
            jnp.where(s.color >= 0, jnp.asarray(self.w_color)[jnp.maximum(s.color, 0)], PAD_ID)[None],
            jnp.where(s.size >= 0, jnp.asarray(self.w_size)[jnp.maximum(s.size, 0)], PAD_ID)[None]])
        p0 = jnp.where(s.page == 0, jnp.asarray([w["page"], w["search"]]), PAD_ID)
        p1 = jnp.where(s.page == 1, jnp.concatenate([jnp.asarray([w["results"], w[":"]]), rows]),
                       PAD_ID)
        p2 = jnp.where(s.page == 2, item, PAD_ID)
        return C.render([instr, [SEP_ID], p0, p1, p2], self.obs_len)

    def _info(self, s: ShopState, params):
        return C.info_dict(success=s.score >= 0.999, score=s.score)

    # ------------------------------------------------------------------ policies
    def expert_policy(self, state, params, key=None):
        return expert_policy(state, params, key)

    def random_policy(self, state, params, key):
        return self.uniform_random_policy(state, params, key)


def legal_mask(s: ShopState, params: ShopParams) -> jax.Array:
    """[K] bool legality of the page's candidate slots (K = Q query slots)."""
    K, n = s.queries.shape[-2], s.order.shape[-1]
    NC, NS = s.colors.shape[-1], s.sizes.shape[-1]
    k = jnp.arange(K)
    res = jnp.concatenate([s.offset * PER_PAGE + jnp.arange(PER_PAGE) < n,
                           jnp.stack([(s.offset + 1) * PER_PAGE < n, params.can_research]),
                           jnp.zeros((K - PER_PAGE - 2,), bool)])
    chosen = (s.color >= 0) & ((s.size >= 0) | (NS == 0))
    buy_ok = ~params.buy_needs_options | chosen
    item = jnp.concatenate([s.colors[s.cur], s.sizes[s.cur], jnp.stack([buy_ok, True]),
                            jnp.zeros((K - NC - NS - 2,), bool)])
    return jnp.where(s.page == 0, k < K, jnp.where(s.page == 1, res, item))


def expert_policy(s: ShopState, params, key=None) -> jax.Array:
    """Privileged scripted expert (knows the target item): [] int32 slot index."""
    NC, NS = s.colors.shape[-1], s.sizes.shape[-1]
    g = s.goal
    a_search = jnp.argmax((s.queries[:, 0] == g[0]) & (s.queries[:, 1] == g[1]))
    pos = jnp.argmax(s.order == s.target)
    pg = pos // PER_PAGE
    a_results = jnp.where(pg == s.offset, pos % PER_PAGE,
                          jnp.where(pg > s.offset, PER_PAGE, PER_PAGE + 1))
    size_todo = (s.size != g[3]) if NS else jnp.asarray(False)
    a_item = jnp.where(s.cur != s.target, NC + NS + 1,
                       jnp.where(s.color != g[2], g[2],
                                 jnp.where(size_todo, NC + g[3], NC + NS)))
    a = jnp.where(s.page == 0, a_search, jnp.where(s.page == 1, a_results, a_item))
    return a.astype(jnp.int32)


def random_policy(state: ShopState, params, key) -> jax.Array:
    """Uniform random index among the legal candidates: [] int32."""
    return C.uniform_policy(legal_mask(state, params), key)
