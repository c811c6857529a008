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
  (small preset: no size attribute, the mean is over 3 attributes; see ShopParams.)
Credit: the query and the option clicks pay off only at "buy"; clicking a wrong item is
recoverable ("go back"), buying it is not.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID

CATEGORIES = ("shirt", "shoes", "bag", "hat", "watch", "jacket")
FEATURES = ("cotton", "leather", "wool", "canvas", "vintage", "waterproof")
COLORS = ("red", "blue", "black", "white")
SIZES = ("small", "medium", "large")
PRICES = tuple(str(10 * i) for i in range(1, 10))      # price index 0..8 -> "10".."90"
MAX_ITEMS = 20
ITEM_IDS = tuple(f"p{i}" for i in range(1, MAX_ITEMS + 1))
PER_PAGE = 3
DECOYS = ("cap", "color", "feature", "category")   # planted near-miss decoys, items 1..4


class Page:
    """ShopState.page."""
    SEARCH, RESULTS, ITEM = range(3)


class Goal:
    """Index into ShopState.goal."""
    CATEGORY, FEATURE, COLOR, SIZE, CAP = range(5)


class Query:
    """Index into ShopState.queries[slot]."""
    CATEGORY, FEATURE = range(2)


class Item:
    """Planted catalogue items before the shuffle: the target, then one per DECOYS kind;
    items from RANDOM on are random."""
    TARGET, OVER_CAP, NO_COLOR, OTHER_FEATURE, OTHER_CATEGORY, RANDOM = range(6)


class Kind:
    """Effect of a step (see `Shop.transition`): by page and candidate slot."""
    SEARCH, CLICK, NEXT, BACK_TO_SEARCH, COLOR, SIZE, BUY, BACK_TO_RESULTS = range(8)


def vocabulary():
    return C.words_of("find a in size under dollars", "page search results : item price",
                      "colors sizes chosen", "search for", "click on the item", "next page",
                      "back to search", "select color", "select size", "buy it now",
                      "go back to results", "results for", "you open", "color set to",
                      "size set to", "next page of results", "you bought", "nothing left",
                      ) | set(CATEGORIES + FEATURES + COLORS + SIZES + PRICES + ITEM_IDS)


@struct.dataclass
class ShopParams:
    """Every setting of `shop` (presets: `small()`, `hard()`).

    Static: categories, features and colours in play (num_categories, num_features,
    num_colors), sizes in play (num_sizes = 0: the task has no size attribute and the reward
    averages 3 attributes), catalogue size num_items, query slots num_queries (= K, at least
    num_colors + num_sizes + 2), planted near-miss `decoys` (of DECOYS), turn budget
    max_turns, token lengths action_len / obs_len / feedback_len. Arrays: p_option,
    buy_needs_options, can_research.
    """

    num_categories: int = C.static_field()
    num_features: int = C.static_field()
    num_colors: int = C.static_field()
    num_sizes: int = C.static_field()
    num_items: int = C.static_field()
    num_queries: int = C.static_field()
    max_turns: int = C.static_field()
    decoys: Tuple[str, ...] = C.static_field()
    action_len: int = C.static_field()
    obs_len: int = C.static_field()
    feedback_len: int = C.static_field()
    p_option: chex.Array           # [] probability that a random item offers an option
    buy_needs_options: chex.Array  # [] bool: "buy it now" is legal only once every option
                                   # of the task (colour, size) has been selected
    can_research: chex.Array       # [] bool: "back to search" is legal on the results page

    @classmethod
    def small(cls) -> "ShopParams":
        """3 categories x 2 features, 5 query slots, colour only (no size), 5 items with two
        near-miss decoys (over the cap, no target colour), the query is final (no "back to
        search"), "buy" needs a colour chosen."""
        return cls(num_categories=3, num_features=2, num_colors=2, num_sizes=0, num_items=5,
                   num_queries=5, max_turns=10, decoys=("cap", "color"), action_len=6,
                   obs_len=56, feedback_len=8, p_option=jnp.asarray(0.5, jnp.float32),
                   buy_needs_options=jnp.asarray(True), can_research=jnp.asarray(False))

    @classmethod
    def hard(cls) -> "ShopParams":
        return cls(num_categories=6, num_features=6, num_colors=4, num_sizes=3, num_items=20,
                   num_queries=12, max_turns=12, decoys=DECOYS, action_len=6, obs_len=56,
                   feedback_len=8, p_option=jnp.asarray(0.5, jnp.float32),
                   buy_needs_options=jnp.asarray(False), can_research=jnp.asarray(True))

    def validate(self) -> None:
        Q = self.num_queries
        if not (Q >= max(self.num_colors + self.num_sizes + 2, PER_PAGE + 2)
                and MAX_ITEMS >= self.num_items >= 5 and Q <= self.num_categories * self.num_features
                and self.num_colors >= 2 and self.num_categories >= 2 and self.num_features >= 2
                and self.num_categories <= len(CATEGORIES) and self.num_features <= len(FEATURES)
                and self.num_colors <= len(COLORS) and self.num_sizes <= len(SIZES)):
            raise ValueError(f"inconsistent shop sizes: {self}")
        for d in self.decoys:
            C.check_choice("decoys", d, DECOYS)
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")


@chex.dataclass(frozen=True)
class ShopState:
    key: chex.PRNGKey
    turn: chex.Array               # [] int32
    done: chex.Array               # [] bool
    page: chex.Array               # [] int32 Page
    queries: chex.Array            # [Q, 2] int32 (category, feature) of each slot, by Query
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
    goal: chex.Array               # [5] int32 category, feature, colour, size, cap, by Goal
    target: chex.Array             # [] int32 the planted target item
    score: chex.Array              # [] float32 reward at buy (0 before)


class Shop(C.TextEnvironment):
    name = "shop"
    params_cls = ShopParams

    def __init__(self, params: ShopParams | None = None):
        params = ShopParams.small() if params is None else params
        params.validate()
        self.params = params
        self.NCAT, self.NFEAT = params.num_categories, params.num_features
        self.NC, self.NS = params.num_colors, params.num_sizes
        self.n_items, self.Q = params.num_items, params.num_queries
        self.decoys = tuple(params.decoys)
        self.num_actions = self.Q
        self.action_len = params.action_len
        self.obs_len = params.obs_len
        self.feedback_len = params.feedback_len
        self.max_turns = params.max_turns
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
                                      "to", "next", "of", "back", "bought", "buy")}
        self._freeze_tables()

    # ------------------------------------------------------------------ protocol
    def reset_env(self, key, params) -> ShopState:
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
        # Planted items (see Item): the target and one near-miss decoy per DECOYS kind.
        P = Item.RANDOM
        cat0, feat0, price0, colors0, sizes0 = cat, feat, price, colors, sizes
        cat = (cat.at[:Item.OTHER_CATEGORY].set(gc)
               .at[Item.OTHER_CATEGORY].set((gc + 1 + other[0] % (NCAT - 1)) % NCAT))
        feat = (feat.at[:Item.OTHER_FEATURE].set(gf)
                .at[Item.OTHER_FEATURE].set((gf + 1 + other[1] % (NF - 1)) % NF)
                .at[Item.OTHER_CATEGORY].set(gf))
        price = (price.at[:P].set(ok_price)
                 .at[Item.OVER_CAP].set(jnp.minimum(cap + 1 + ok_price[Item.OVER_CAP] % 2, 8)))
        colors = colors.at[:P, gcol].set(True).at[Item.NO_COLOR, gcol].set(False)
        if NS:
            sizes = sizes.at[:P, gsz].set(True)
        # Decoy kinds not in play stay random items.
        rnd = np.asarray([False] + [k not in self.decoys for k in DECOYS]
                         + [True] * (n - P))
        cat, feat, price = (jnp.where(rnd, a0, a) for a0, a in ((cat0, cat), (feat0, feat),
                                                                (price0, price)))
        colors = jnp.where(rnd[:, None], colors0, colors)
        sizes = jnp.where(rnd[:, None], sizes0, sizes)
        colors = colors.at[:, (gcol + 1) % NC].set(True)   # every item offers some colour
        if NS:
            sizes = sizes.at[:, (gsz + 1) % NS].set(True)
        perm = jax.random.permutation(ks[12], n)
        target = jnp.argsort(perm)[Item.TARGET]
        # Q query slots: the right (category, feature) pair plus Q-1 other pairs, shuffled.
        goal_pair = gc * NF + gf
        u = jax.random.uniform(ks[14], (NCAT * NF,)).at[goal_pair].set(2.0)
        queries = jnp.concatenate([jnp.argsort(u)[: self.Q - 1], goal_pair[None]])
        queries = jax.random.permutation(ks[13], queries)
        queries = jnp.stack([queries // NF, queries % NF], -1)          # by Query
        return ShopState(
            key=key, turn=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool),
            page=jnp.asarray(Page.SEARCH, jnp.int32), queries=queries.astype(jnp.int32),
            order=jnp.arange(n, dtype=jnp.int32), offset=jnp.zeros((), jnp.int32),
            cur=jnp.zeros((), jnp.int32), color=jnp.asarray(-1, jnp.int32),
            size=jnp.asarray(-1, jnp.int32),
            cat=cat[perm].astype(jnp.int32), feat=feat[perm].astype(jnp.int32),
            price=price[perm].astype(jnp.int32), colors=colors[perm], sizes=sizes[perm],
            noise=jax.random.uniform(ks[15], (n,)),
            goal=jnp.stack([gc, gf, gcol, gsz, cap]).astype(jnp.int32),     # by Goal
            target=target.astype(jnp.int32), score=jnp.zeros((), jnp.float32))

    def legal_actions(self, state, params):
        K, A = self.num_actions, self.action_len
        shown = state.order[jnp.clip(state.offset * PER_PAGE + jnp.arange(PER_PAGE), 0,
                                     self.n_items - 1)]
        res = jnp.concatenate([jnp.asarray(self.t_click)[shown], jnp.asarray(self.t_nav),
                               jnp.zeros((K - PER_PAGE - 2, A), jnp.int32)])
        q = state.queries
        search = jnp.asarray(self.t_search)[q[:, Query.CATEGORY] * self.NFEAT
                                            + q[:, Query.FEATURE]]
        cands = jnp.where(state.page == Page.SEARCH, search,
                          jnp.where(state.page == Page.RESULTS, res, jnp.asarray(self.t_item)))
        return cands.astype(jnp.int32), legal_mask(state, params)

    # ------------------------------------------------------------------ dynamics
    def transition(self, s: ShopState, idx, rng, params):
        F, NC, NS, w = self.feedback_len, self.NC, self.NS, self.w
        fb = lambda *segs: C.render(segs, F)
        # search page: run query idx
        qc, qf = s.queries[jnp.minimum(idx, self.Q - 1)]
        rel = 2.0 * (s.cat == qc) + 1.0 * (s.feat == qf) + 0.5 * s.noise
        s_search = s.replace(page=jnp.asarray(Page.RESULTS, jnp.int32),
                             offset=jnp.zeros((), jnp.int32),
                             order=jnp.argsort(-rel).astype(jnp.int32))
        fb_search = fb([w["results"], w["for"], self.w_feat[qf], self.w_cat[qc]])
        # results page
        item = s.order[jnp.clip(s.offset * PER_PAGE + jnp.minimum(idx, PER_PAGE - 1), 0,
                                self.n_items - 1)]
        s_click = s.replace(page=jnp.asarray(Page.ITEM, jnp.int32), cur=item,
                            color=jnp.asarray(-1, jnp.int32), size=jnp.asarray(-1, jnp.int32))
        fb_click = fb([w["you"], w["open"], self.w_pid[item]])
        s_next = s.replace(offset=s.offset + 1)
        fb_next = fb([w["next"], w["page"], w["of"], w["results"]])
        s_back0 = s.replace(page=jnp.asarray(Page.SEARCH, jnp.int32))
        fb_back0 = fb([w["back"], w["to"], w["search"]])
        # item page
        c = jnp.clip(idx, 0, NC - 1)
        z = jnp.clip(idx - NC, 0, NS - 1)
        s_color = s.replace(color=c.astype(jnp.int32))
        fb_color = fb([w["color"], w["set"], w["to"], self.w_color[c]])
        s_size = s.replace(size=z.astype(jnp.int32))
        fb_size = fb([w["size"], w["set"], w["to"], self.w_size[z]])
        i, g = s.cur, s.goal
        r_type = jnp.where(s.cat[i] == g[Goal.CATEGORY], 1.0, 0.1)
        match = ((s.feat[i] == g[Goal.FEATURE]).astype(jnp.float32) + (s.color == g[Goal.COLOR])
                 + (s.price[i] <= g[Goal.CAP]))
        if NS:
            match = match + (s.size == g[Goal.SIZE])
        r_buy = (r_type * match / (4.0 if NS else 3.0)).astype(jnp.float32)
        s_buy = s.replace(done=jnp.ones((), bool), score=r_buy)
        fb_buy = fb([w["you"], w["bought"], self.w_pid[i]])
        s_back1 = s.replace(page=jnp.asarray(Page.RESULTS, jnp.int32))
        fb_back1 = fb([w["back"], w["to"], w["results"]])
        kind = step_kind(s.page, idx, NC, NS)
        branches = {Kind.SEARCH: (s_search, fb_search), Kind.CLICK: (s_click, fb_click),
                    Kind.NEXT: (s_next, fb_next), Kind.BACK_TO_SEARCH: (s_back0, fb_back0),
                    Kind.COLOR: (s_color, fb_color), Kind.SIZE: (s_size, fb_size),
                    Kind.BUY: (s_buy, fb_buy), Kind.BACK_TO_RESULTS: (s_back1, fb_back1)}
        out_s, out_fb = branches[Kind.SEARCH]
        for k in range(Kind.CLICK, Kind.BACK_TO_RESULTS + 1):
            bs, bfb = branches[k]
            out_s = C.tree_select(kind == k, bs, out_s)
            out_fb = jnp.where(kind == k, bfb, out_fb)
        return out_s, out_fb, jnp.where(kind == Kind.BUY, r_buy, 0.0)

    def observe(self, s: ShopState, params) -> jax.Array:
        """[O] int32: the observation tokens of state `s` (what reset/step return)."""
        w, g = self.w, s.goal
        instr = [w["find"], w["a"], self.w_feat[g[Goal.FEATURE]], self.w_cat[g[Goal.CATEGORY]],
                 w["in"], self.w_color[g[Goal.COLOR]]]
        if self.NS:
            instr += [w["size"], self.w_size[g[Goal.SIZE]]]
        instr += [w["under"], self.w_price[g[Goal.CAP]], w["dollars"]]
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
        p0 = jnp.where(s.page == Page.SEARCH, jnp.asarray([w["page"], w["search"]]), PAD_ID)
        p1 = jnp.where(s.page == Page.RESULTS,
                       jnp.concatenate([jnp.asarray([w["results"], w[":"]]), rows]), PAD_ID)
        p2 = jnp.where(s.page == Page.ITEM, item, PAD_ID)
        return C.render([instr, [SEP_ID], p0, p1, p2], self.obs_len)

    def info(self, s: ShopState, params):
        return C.info_dict(success=s.score >= 0.999, score=s.score)

    rationale_len = 8

    def expert_rationale(self, s: ShopState, params) -> jax.Array:
        """[8] int32: the expert's sub-goal (expert_policy's branches), in its words:
          search page            "find {feature} {category} under {cap} dollars"
          results page           "item {target} under {cap} dollars"  (the item it looks for)
          item page, wrong item  "back to results for {target}"
          colour / size to set   "item {target} color {c}" / "item {target} size {z}"
          all set                "buy {target} under {cap} dollars"."""
        w, g = self.w, s.goal
        pid = jnp.asarray(self.w_pid)[s.target]
        cap = [w["under"], jnp.asarray(self.w_price)[g[Goal.CAP]], w["dollars"]]
        r = lambda *words: C.render([jnp.stack([jnp.asarray(x, jnp.int32) for x in words])],
                                    self.rationale_len)  # noqa: E731
        find = r(w["find"], jnp.asarray(self.w_feat)[g[Goal.FEATURE]],
                 jnp.asarray(self.w_cat)[g[Goal.CATEGORY]], *cap)
        look = r(w["item"], pid, *cap)
        back = r(w["back"], w["to"], w["results"], w["for"], pid)
        color = r(w["item"], pid, w["color"], jnp.asarray(self.w_color)[g[Goal.COLOR]])
        size = r(w["item"], pid, w["size"], jnp.asarray(self.w_size)[g[Goal.SIZE]])
        buy = r(w["buy"], pid, *cap)
        size_todo = (s.size != g[Goal.SIZE]) if self.NS else jnp.asarray(False)
        on_item = jnp.where(s.cur != s.target, back, jnp.where(
            s.color != g[Goal.COLOR], color, jnp.where(size_todo, size, buy)))
        return jnp.where(s.page == Page.SEARCH, find,
                         jnp.where(s.page == Page.RESULTS, look, on_item)).astype(jnp.int32)


def step_kind(page, idx, NC: int, NS: int) -> jax.Array:
    """Kind of the step of candidate slot idx on `page`. Results page: PER_PAGE item slots,
    "next page", "back to search"; item page: NC colour slots, NS size slots, "buy it now",
    "go back to results"."""
    on_results = jnp.where(idx < PER_PAGE, Kind.CLICK,
                           jnp.where(idx == PER_PAGE, Kind.NEXT, Kind.BACK_TO_SEARCH))
    on_item = jnp.where(idx < NC, Kind.COLOR, jnp.where(
        idx < NC + NS, Kind.SIZE, jnp.where(idx == NC + NS, Kind.BUY, Kind.BACK_TO_RESULTS)))
    return jnp.where(page == Page.SEARCH, Kind.SEARCH,
                     jnp.where(page == Page.RESULTS, on_results, on_item))


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
    return jnp.where(s.page == Page.SEARCH, k < K, jnp.where(s.page == Page.RESULTS, res, item))


def expert_policy(s: ShopState, params, key=None) -> jax.Array:
    """Privileged scripted expert (knows the target item): [] int32 slot index."""
    NC, NS = s.colors.shape[-1], s.sizes.shape[-1]
    g = s.goal
    a_search = jnp.argmax((s.queries[:, Query.CATEGORY] == g[Goal.CATEGORY])
                          & (s.queries[:, Query.FEATURE] == g[Goal.FEATURE]))
    pos = jnp.argmax(s.order == s.target)
    pg = pos // PER_PAGE
    a_results = jnp.where(pg == s.offset, pos % PER_PAGE,
                          jnp.where(pg > s.offset, PER_PAGE, PER_PAGE + 1))
    size_todo = (s.size != g[Goal.SIZE]) if NS else jnp.asarray(False)
    a_item = jnp.where(s.cur != s.target, NC + NS + 1,                  # go back to results
                       jnp.where(s.color != g[Goal.COLOR], g[Goal.COLOR],
                                 jnp.where(size_todo, NC + g[Goal.SIZE], NC + NS)))  # buy
    a = jnp.where(s.page == Page.SEARCH, a_search,
                  jnp.where(s.page == Page.RESULTS, a_results, a_item))
    return a.astype(jnp.int32)


def random_policy(state: ShopState, params, key) -> jax.Array:
    """Uniform random index among the legal candidates: [] int32."""
    return C.uniform_policy(legal_mask(state, params), key)
