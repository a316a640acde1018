"""The embedded synthetic ads ecosystem (DESIGN §4), seeded, deterministic and vectorised.

A planted interest hierarchy of ``C`` coarse interests × ``F`` fine interests, each fine interest
with its own word list (``synthetic_vocab``). Advertisers serve one coarse interest; each runs
campaigns on fine interests of it; campaigns hold ads, each promoting a product of its fine
interest. Products carry titles written from their fine interest's words and their brand.

Users hold a mixture of 1–3 fine interests, and a share of them drift to a new mixture halfway
through. Each generated interaction first draws the user (by activity, among users already
arrived), a time after the user's arrival, then one of the user's interests at that time (10 %
noise: any interest), and then:

* ads funnel: ``impression`` of an ad (70 % targeted at the drawn interest) → ``click`` with
  probability 12 % when the ad matches the drawn interest, else 1 % → ``conversion`` with
  probability 2.5 % of matched clicks and 0.5 % of others (conversions are 1–3 % of clicks);
* organic: ``view`` of a product of the drawn interest (Zipf popularity among products already
  listed) → ``cart`` 10 % → ``purchase`` 30 % of carts.

New users and products arrive every day (40 % of each exist at the start). The planted truth
(``coarse_interest``, ``fine_interest`` per user, product, ad, campaign, category; coarse only
for advertisers and brands) goes to the ``planted_truth`` table. Timestamps start at
2026-01-01 00:00 UTC. The same settings give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hir.graph.sources.base import REJECTED_COLUMNS, SourceBatch, empty_frame
from hir.graph.sources.synthetic_vocab import BRAND_SYLLABLES, interest_table
from hir.settings import Settings

START = np.datetime64("2026-01-01T00:00:00", "s")
DAY = 86_400.0


@dataclass(frozen=True)
class SyntheticShape:
    """Population sizes derived from the number of events."""

    users: int
    products: int
    advertisers_per_coarse: int = 5
    campaigns_per_advertiser: int = 3
    ads_per_campaign: int = 4
    brands_per_coarse: int = 5

    @classmethod
    def for_events(cls, events: int) -> "SyntheticShape":
        return cls(users=max(200, events // 60), products=max(300, events // 150))


@dataclass
class Ecosystem:
    """Every entity array of one generated ecosystem (indices are positions in these arrays)."""

    coarse_names: list[str]
    fine_names: list[list[str]]
    words: list[list[list[str]]]
    n_coarse: int
    n_fine: int
    user_first: np.ndarray  # arrival time, seconds since START
    user_activity: np.ndarray
    user_fines: np.ndarray  # [U, 3] global fine ids (coarse * F + fine) before drift
    user_weights: np.ndarray  # [U, 3]
    user_fines_late: np.ndarray  # after drift
    user_drift_at: np.ndarray  # seconds; +inf for users who never drift
    product_fine: np.ndarray
    product_first: np.ndarray
    product_brand: np.ndarray
    brand_coarse: np.ndarray
    brand_names: list[str]
    advertiser_coarse: np.ndarray
    campaign_advertiser: np.ndarray
    campaign_fine: np.ndarray
    campaign_first: np.ndarray
    ad_campaign: np.ndarray
    ad_product: np.ndarray


def _grouped(keys: np.ndarray, order_by: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Members sorted by (key, order_by) and the offsets of each key's block."""
    order = np.lexsort((order_by, keys))
    offsets = np.zeros(groups + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(keys, minlength=groups))
    return order, offsets


def _pick_in_group(rng, group: np.ndarray, t: np.ndarray, order, offsets, first: np.ndarray, skew: float) -> np.ndarray:
    """For each (group, time), a member of the group already present at that time, older ones likelier."""
    members_first = first[order]
    start, end = offsets[group], offsets[group + 1]
    # Members of a group are sorted by arrival, so those present at t form a prefix of its block.
    alive = np.empty_like(start)
    for g in np.unique(group):
        sel = group == g
        block = members_first[offsets[g] : offsets[g + 1]]
        alive[sel] = np.searchsorted(block, t[sel], side="right")
    alive = np.maximum(alive, 1)
    rank = np.minimum((alive * rng.random(group.size) ** skew).astype(np.int64), end - start - 1)
    return order[start + rank]


def build_ecosystem(settings: Settings, shape: SyntheticShape, rng: np.random.Generator) -> Ecosystem:
    C, F, days = settings.synthetic_coarse, settings.synthetic_fine, settings.synthetic_days
    horizon = days * DAY
    coarse_names, fine_names, words = interest_table(C, F)
    n_fine = C * F

    def arrivals(n: int) -> np.ndarray:
        late = rng.random(n) >= 0.4
        return np.where(late, rng.random(n) * horizon, 0.0)

    U = shape.users
    fines = rng.integers(0, n_fine, size=(U, 3))
    primary_coarse = fines[:, 0] // F
    # Secondary interests mostly stay within the primary coarse interest.
    same = rng.random((U, 2)) < 0.7
    fines[:, 1:] = np.where(same, primary_coarse[:, None] * F + rng.integers(0, F, size=(U, 2)), fines[:, 1:])
    k = rng.integers(1, 4, size=U)
    weights = rng.dirichlet(np.ones(3), size=U) * (np.arange(3)[None, :] < k[:, None])
    weights[:, 0] += 1.0
    weights /= weights.sum(1, keepdims=True)
    late = fines.copy()
    late[:, 1] = primary_coarse * F + rng.integers(0, F, size=U)
    drift = rng.random(U) < 0.3
    drift_at = np.where(drift, horizon * (0.3 + 0.5 * rng.random(U)), np.inf)

    n_brands = C * shape.brands_per_coarse
    brand_coarse = np.repeat(np.arange(C), shape.brands_per_coarse)
    syll = np.array(BRAND_SYLLABLES)
    parts = rng.integers(0, len(syll), size=(n_brands, 3))
    brand_names = ["".join(syll[p]).capitalize() for p in parts]

    P = shape.products
    product_fine = rng.integers(0, n_fine, size=P)
    product_brand = (product_fine // F) * shape.brands_per_coarse + rng.integers(0, shape.brands_per_coarse, size=P)

    A = C * shape.advertisers_per_coarse
    advertiser_coarse = np.repeat(np.arange(C), shape.advertisers_per_coarse)
    campaign_advertiser = np.repeat(np.arange(A), shape.campaigns_per_advertiser)
    campaign_fine = advertiser_coarse[campaign_advertiser] * F + rng.integers(0, F, size=campaign_advertiser.size)
    campaign_first = arrivals(campaign_advertiser.size)
    ad_campaign = np.repeat(np.arange(campaign_advertiser.size), shape.ads_per_campaign)
    product_first = arrivals(P)
    # Each ad promotes a product of its campaign's fine interest (a new one when none exists).
    ad_product = np.empty(ad_campaign.size, dtype=np.int64)
    by_fine = [np.flatnonzero(product_fine == f) for f in range(n_fine)]
    for i, c in enumerate(ad_campaign):
        pool = by_fine[campaign_fine[c]]
        ad_product[i] = pool[rng.integers(0, pool.size)] if pool.size else 0
    return Ecosystem(
        coarse_names, fine_names, words, C, F,
        user_first=arrivals(U), user_activity=rng.lognormal(0.0, 1.0, size=U),
        user_fines=fines, user_weights=weights, user_fines_late=late, user_drift_at=drift_at,
        product_fine=product_fine, product_first=product_first, product_brand=product_brand,
        brand_coarse=brand_coarse, brand_names=brand_names, advertiser_coarse=advertiser_coarse,
        campaign_advertiser=campaign_advertiser, campaign_fine=campaign_fine, campaign_first=campaign_first,
        ad_campaign=ad_campaign, ad_product=ad_product,
    )


def _draw_contexts(eco: Ecosystem, n: int, horizon: float, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, time, fine interest) for ``n`` interactions."""
    p = eco.user_activity / eco.user_activity.sum()
    user = rng.choice(p.size, size=n, p=p)
    first = eco.user_first[user]
    t = first + rng.random(n) * (horizon - first)
    cum = np.cumsum(eco.user_weights[user], axis=1)
    slot = (rng.random(n)[:, None] > cum).sum(1).clip(0, 2)
    drifted = t >= eco.user_drift_at[user]
    fine = np.where(drifted, eco.user_fines_late[user, slot], eco.user_fines[user, slot])
    noise = rng.random(n) < 0.1
    fine = np.where(noise, rng.integers(0, eco.n_coarse * eco.n_fine, size=n), fine)
    return user, t, fine


def generate_events(eco: Ecosystem, events: int, horizon: float, rng) -> dict[str, np.ndarray]:
    """Arrays ``src`` (user), ``dst`` (ad or product index), ``kind``, ``t`` (seconds) for ~``events`` events."""
    n_imp = int(events * 0.45 / 1.07)
    n_view = int(events * 0.55 / 1.13)

    user, t, fine = _draw_contexts(eco, n_imp, horizon, rng)
    ad_fine = eco.campaign_fine[eco.ad_campaign]
    ad_first = eco.campaign_first[eco.ad_campaign]
    targeted = rng.random(n_imp) < 0.7
    group = np.where(targeted, fine, rng.integers(0, eco.n_coarse * eco.n_fine, size=n_imp))
    order, offsets = _grouped(ad_fine, ad_first, eco.n_coarse * eco.n_fine)
    has_ads = (offsets[group + 1] - offsets[group]) > 0
    user, t, fine, group = user[has_ads], t[has_ads], fine[has_ads], group[has_ads]
    ad = _pick_in_group(rng, group, t, order, offsets, ad_first, skew=1.0)
    matched = ad_fine[ad] == fine
    click = rng.random(ad.size) < np.where(matched, 0.12, 0.01)
    t_click = t[click] + rng.exponential(30.0, click.sum())
    conv = rng.random(click.sum()) < np.where(matched[click], 0.025, 0.005)
    t_conv = t_click[conv] + rng.exponential(3600.0, conv.sum())

    v_user, v_t, v_fine = _draw_contexts(eco, n_view, horizon, rng)
    p_order, p_offsets = _grouped(eco.product_fine, eco.product_first, eco.n_coarse * eco.n_fine)
    has_products = (p_offsets[v_fine + 1] - p_offsets[v_fine]) > 0
    v_user, v_t, v_fine = v_user[has_products], v_t[has_products], v_fine[has_products]
    product = _pick_in_group(rng, v_fine, v_t, p_order, p_offsets, eco.product_first, skew=2.0)
    cart = rng.random(product.size) < 0.10
    t_cart = v_t[cart] + rng.exponential(300.0, cart.sum())
    buy = rng.random(cart.sum()) < 0.30
    t_buy = t_cart[buy] + rng.exponential(900.0, buy.sum())

    parts = [
        (user, ad, 0, t), (user[click], ad[click], 1, t_click), (user[click][conv], ad[click][conv], 2, t_conv),
        (v_user, product, 3, v_t), (v_user[cart], product[cart], 4, t_cart), (v_user[cart][buy], product[cart][buy], 5, t_buy),
    ]
    out = {
        "src": np.concatenate([p[0] for p in parts]),
        "dst": np.concatenate([p[1] for p in parts]),
        "kind": np.concatenate([np.full(p[0].size, p[2], dtype=np.int8) for p in parts]),
        "t": np.concatenate([p[3] for p in parts]),
    }
    # Follow-ups pushed past the horizon are cut, so the log ends at the last day.
    keep = out["t"] < horizon
    return {k: v[keep] for k, v in out.items()}


EVENT_KINDS = ["impression", "click", "conversion", "view", "cart", "purchase"]
DST_IS_AD = np.array([True, True, True, False, False, False])


def _timestamps(seconds: np.ndarray) -> pd.Series:
    return pd.Series((START + (seconds * 1e6).astype("timedelta64[us]")).astype("datetime64[us]")).dt.tz_localize("UTC")


def _keys(prefix: str, n: int) -> np.ndarray:
    return np.char.add(prefix, np.arange(n).astype(str)).astype(object)


def _frames(eco: Ecosystem, ev: dict[str, np.ndarray], rng) -> SourceBatch:
    C, F = eco.n_coarse, eco.n_fine
    U, P = eco.user_first.size, eco.product_fine.size
    n_fine = C * F
    fine_label = [f"{eco.coarse_names[g // F]}/{eco.fine_names[g // F][g % F]}" for g in range(n_fine)]

    user_keys, product_keys, ad_keys = _keys("u", U), _keys("p", P), _keys("ad", eco.ad_campaign.size)
    camp_keys, adv_keys = _keys("c", eco.campaign_fine.size), _keys("adv", eco.advertiser_coarse.size)
    brand_keys = _keys("b", eco.brand_coarse.size)
    fine_keys = np.array([f"cat:{label}" for label in fine_label], dtype=object)
    coarse_keys = np.array([f"cat:{name}" for name in eco.coarse_names], dtype=object)

    is_ad = DST_IS_AD[ev["kind"]]
    dst_keys = np.where(is_ad, ad_keys[np.minimum(ev["dst"], ad_keys.size - 1)], product_keys[np.minimum(ev["dst"], P - 1)])
    kinds = pd.Categorical.from_codes(ev["kind"], categories=EVENT_KINDS)
    events = pd.DataFrame({
        "src_type": pd.Categorical.from_codes(np.zeros(ev["src"].size, dtype=np.int8), categories=["user"]),
        "src_key": pd.Categorical.from_codes(ev["src"], categories=user_keys),
        "dst_type": pd.Categorical.from_codes(np.where(is_ad, 0, 1).astype(np.int8), categories=["ad", "product"]),
        "dst_key": dst_keys,
        "event_type": kinds,
        "ts": _timestamps(ev["t"]),
        "value": np.ones(ev["src"].size),
    })

    ad_first = eco.campaign_first[eco.ad_campaign]
    entities = pd.concat([
        _entity_frame("user", user_keys, eco.user_first),
        _entity_frame("product", product_keys, eco.product_first, [json.dumps({"price": round(float(p), 2)}) for p in rng.lognormal(3.0, 0.8, P)]),
        _entity_frame("ad", ad_keys, ad_first),
        _entity_frame("campaign", camp_keys, eco.campaign_first),
        _entity_frame("advertiser", adv_keys, np.zeros(adv_keys.size)),
        _entity_frame("brand", brand_keys, np.zeros(brand_keys.size)),
        _entity_frame("category", np.concatenate([coarse_keys, fine_keys]), np.zeros(C + n_fine)),
    ], ignore_index=True)

    relations = pd.concat([
        _relation_frame("ad", ad_keys, "campaign", camp_keys[eco.ad_campaign], "in_campaign", ad_first),
        _relation_frame("campaign", camp_keys, "advertiser", adv_keys[eco.campaign_advertiser], "of_advertiser", eco.campaign_first),
        _relation_frame("ad", ad_keys, "product", product_keys[eco.ad_product], "promotes", ad_first),
        _relation_frame("product", product_keys, "brand", brand_keys[eco.product_brand], "of_brand", eco.product_first),
        _relation_frame("product", product_keys, "category", fine_keys[eco.product_fine], "in_category", eco.product_first),
        _relation_frame("category", fine_keys, "category", coarse_keys[np.arange(n_fine) // F], "subcategory_of", np.zeros(n_fine)),
    ], ignore_index=True)

    content = pd.concat([
        _content_frame("product", product_keys, _titles(eco, eco.product_fine, eco.product_brand, rng, fine_label)),
        _content_frame("ad", ad_keys, _ad_copy(eco, ad_keys.size, rng, fine_label)),
        _content_frame("campaign", camp_keys, [f"campaign for {fine_label[f].replace('/', ' ')}" for f in eco.campaign_fine]),
        _content_frame("brand", brand_keys, [f"{n} brand of {eco.coarse_names[c]}" for n, c in zip(eco.brand_names, eco.brand_coarse)]),
        _content_frame("category", np.concatenate([coarse_keys, fine_keys]), list(eco.coarse_names) + [l.replace("/", " ") for l in fine_label]),
    ], ignore_index=True)

    truth = pd.concat([
        _truth_frame("user", user_keys, eco.user_fines[:, 0], F),
        _truth_frame("product", product_keys, eco.product_fine, F),
        _truth_frame("ad", ad_keys, eco.campaign_fine[eco.ad_campaign], F),
        _truth_frame("campaign", camp_keys, eco.campaign_fine, F),
        _truth_frame("category", fine_keys, np.arange(n_fine), F),
        pd.DataFrame({"entity_type": "advertiser", "source_key": adv_keys, "coarse_interest": eco.advertiser_coarse.astype(np.int32), "fine_interest": pd.array([None] * adv_keys.size, dtype="Int32")}),
        pd.DataFrame({"entity_type": "brand", "source_key": brand_keys, "coarse_interest": eco.brand_coarse.astype(np.int32), "fine_interest": pd.array([None] * brand_keys.size, dtype="Int32")}),
    ], ignore_index=True)
    truth["fine_interest"] = truth["fine_interest"].astype("Int32")
    n = int(ev["src"].size)
    return SourceBatch(
        source="synthetic", location="generated", fingerprint="", rows_read=n, rows_accepted=n,
        entities=entities, events=events, relations=relations, content=content,
        rejected=empty_frame(REJECTED_COLUMNS), extra_tables={"planted_truth": truth},
    )


def _entity_frame(kind: str, keys: np.ndarray, first: np.ndarray, attrs: list | None = None) -> pd.DataFrame:
    return pd.DataFrame({"entity_type": kind, "source_key": keys, "first_seen": _timestamps(first), "attrs": attrs})


def _relation_frame(st, sk, dt, dk, relation, valid_from) -> pd.DataFrame:
    return pd.DataFrame({"src_type": st, "src_key": sk, "dst_type": dt, "dst_key": dk, "relation": relation, "valid_from": _timestamps(valid_from)})


def _content_frame(kind: str, keys: np.ndarray, texts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"entity_type": kind, "source_key": keys, "text": texts, "image_uri": None})


def _truth_frame(kind: str, keys: np.ndarray, fine: np.ndarray, F: int) -> pd.DataFrame:
    return pd.DataFrame({"entity_type": kind, "source_key": keys, "coarse_interest": (fine // F).astype(np.int32), "fine_interest": (fine % F).astype(np.int32)})


def _titles(eco: Ecosystem, fine: np.ndarray, brand: np.ndarray, rng, fine_label: list[str]) -> list[str]:
    F = eco.n_fine
    picks = rng.integers(0, 5, size=(fine.size, 3))
    return [
        f"{eco.brand_names[b]} {' '.join(eco.words[g // F][g % F][j] for j in dict.fromkeys(p))} for {fine_label[g].split('/')[1]}"
        for g, b, p in zip(fine, brand, picks)
    ]


def _ad_copy(eco: Ecosystem, n: int, rng, fine_label: list[str]) -> list[str]:
    F = eco.n_fine
    fine = eco.campaign_fine[eco.ad_campaign]
    product_fine = eco.product_fine[eco.ad_product]
    picks = rng.integers(0, 5, size=(n, 2))
    return [
        f"Shop {eco.words[g // F][g % F][p[0]]} and {eco.words[h // F][h % F][p[1]]} deals in {fine_label[g].replace('/', ' ')}"
        for g, h, p in zip(fine, product_fine, picks)
    ]


def generate(settings: Settings, events: int | None = None) -> SourceBatch:
    """Generate the ecosystem for ``settings`` (seed, sizes); ``events`` overrides the event count."""
    events = settings.synthetic_events if events is None else events
    rng = np.random.default_rng(settings.seed)
    shape = SyntheticShape.for_events(events)
    eco = build_ecosystem(settings, shape, rng)
    ev = generate_events(eco, events, settings.synthetic_days * DAY, rng)
    batch = _frames(eco, ev, rng)
    identity = json.dumps({"seed": settings.seed, "events": events, "days": settings.synthetic_days,
                           "coarse": settings.synthetic_coarse, "fine": settings.synthetic_fine, "version": 1}, sort_keys=True)
    batch.fingerprint = hashlib.sha256(identity.encode()).hexdigest()
    batch.location = f"synthetic seed={settings.seed} events={events}"
    batch.whole_world = True
    return batch


def read(path, settings: Settings) -> SourceBatch:
    """Source-adapter entry point: the synthetic source has no input files."""
    return generate(settings)
