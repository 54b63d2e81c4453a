//! # The transaction mix a workload defines, the deck that deals it, and the verdict on it
//!
//! A benchmark whose engine starves one kind of transaction is measured on a cheaper mix and
//! looks faster for it. So a workload with a defined mix says so ([`MixSpec`]), every report
//! carries the *completed* share of each kind over the measured window ([`MixReport`]: committed
//! plus user aborts, which are the procedure's own final answer), and a verdict against the
//! minimums:
//!
//! * TPC-C (clause 5.2.3) states minimums: Payment ≥ 43%, Order-Status, Delivery and
//!   Stock-Level ≥ 4% each, New-Order the rest. A run below any of them is not a TPC-C run.
//! * A workload without stated minimums (ticketing, YCSB-T) is held to its own defined shares:
//!   a kind holds when its completed share is at least the defined share less the larger of 10%
//!   of it and three binomial standard deviations over the completed count, which a fair
//!   random draw passes and a starved kind does not.
//!
//! With [`MixSpec::deck`] the harness deals each client's next kind from one shared deck of
//! cards ([`Deck`], clause 5.2.4.2), reshuffled when it runs out, so the attempted mix over
//! any stretch of the run is the deck's to within a card of each kind per deck boundary. (The
//! specification has a deck per terminal; with runs of seconds and up to 128 clients a
//! terminal deals only a few cards in the window, and 128 partial decks would leave the mix
//! short of the minimums by chance. The clients share one deck instead.)
//!
//! [`MixSpec::p90_limits`] are the response-time constraints (TPC-C clause 5.2.5.4: 90% of
//! each type within 5 s, Stock-Level 20 s, Delivery 80 s); the report gives each kind's 90th
//! percentile against its limit.

use crate::workload::Outcomes;
use hdrhistogram::Histogram;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Latency of one kind of transaction over the measured window, microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Committed transactions of this kind in the window.
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        LatencySummary {
            count: h.len(),
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// One kind of a defined mix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindMix {
    pub kind: &'static str,
    /// Cards of this kind in the deck, or its weight in the random draw (shares are
    /// `cards / sum of cards`).
    pub cards: u32,
    /// The least completed share the rule allows (`None`: the workload states none; the
    /// tolerance rule of the module doc applies unless [`KindMix::rest`]).
    pub min_share: Option<f64>,
    /// "The rest" (TPC-C's New-Order): no minimum of its own.
    pub rest: bool,
    /// Longest allowed 90th-percentile response time, µs.
    pub p90_limit_us: Option<u64>,
}

/// The mix a workload defines (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixSpec {
    /// Where the rule comes from, e.g. `"TPC-C 5.2.3 minimums"`.
    pub rule: &'static str,
    pub kinds: Vec<KindMix>,
    /// The harness deals kinds from a shared deck of these cards (else the workload draws).
    pub deck: bool,
    /// The kind whose completed rate per minute is the headline metric, and its name (TPC-C:
    /// New-Orders, `tpmC`).
    pub per_minute: Option<(&'static str, &'static str)>,
}

impl MixSpec {
    /// A workload's own defined shares (no spec minimums): each kind's `cards` out of the
    /// total, checked with a tolerance of max(10% of the share, 3 standard deviations).
    pub fn defined_shares(kinds: impl IntoIterator<Item = (&'static str, u32)>) -> Self {
        MixSpec {
            rule: "the defined shares, less max(10%, 3 sd)",
            kinds: kinds
                .into_iter()
                .map(|(kind, cards)| KindMix { kind, cards, min_share: None, rest: false, p90_limit_us: None })
                .collect(),
            deck: false,
            per_minute: None,
        }
    }

    pub fn cards(&self) -> u32 {
        self.kinds.iter().map(|k| k.cards).sum()
    }

    /// The share of `kind` in the deck.
    pub fn target(&self, kind: &str) -> f64 {
        let total = self.cards().max(1) as f64;
        self.kinds.iter().find(|k| k.kind == kind).map_or(0.0, |k| k.cards as f64 / total)
    }
}

/// One kind's share of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindShare {
    pub kind: String,
    /// Committed plus user-aborted (completed) transactions of this kind in the window.
    pub completed: u64,
    pub share: f64,
    /// The defined share (deck or weights).
    pub target: f64,
    /// The least share this kind needed (`None` for "the rest").
    pub min_share: Option<f64>,
    pub ok: bool,
    pub p90_us: Option<u64>,
    pub p90_limit_us: Option<u64>,
    /// Whether the 90th percentile is within its limit (`true` without a limit).
    pub p90_ok: bool,
}

/// The completed mix of one run and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixReport {
    pub rule: String,
    pub completed: u64,
    pub kinds: Vec<KindShare>,
    /// Every kind at or above its minimum.
    pub holds: bool,
    /// Every kind's 90th percentile within its limit.
    pub p90_holds: bool,
    /// Transactions given up in the window (a workload that deals a deck must give up none).
    pub gave_up: u64,
    /// `tpmC` or the like: completed transactions of [`MixSpec::per_minute`]'s kind per minute.
    pub per_minute: Option<PerMinute>,
}

/// A per-minute headline rate (TPC-C's tpmC).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerMinute {
    pub name: String,
    pub kind: String,
    pub value: f64,
}

/// Tolerance of a kind without a stated minimum (see the module doc).
fn tolerance(target: f64, completed: u64) -> f64 {
    let n = completed.max(1) as f64;
    (0.1 * target).max(3.0 * (target * (1.0 - target) / n).sqrt())
}

/// The verdict on a run's outcomes (measured window) against `spec`. `measured_secs` gives the
/// per-minute rate; `latency` the 90th percentiles.
pub fn verdict(
    spec: &MixSpec,
    outcomes: &BTreeMap<String, Outcomes>,
    latency: &BTreeMap<String, LatencySummary>,
    measured_secs: f64,
) -> MixReport {
    let done = |kind: &str| outcomes.get(kind).map_or(0, |o| o.committed + o.user_aborts);
    let completed: u64 = spec.kinds.iter().map(|k| done(k.kind)).sum();
    let mut kinds = Vec::with_capacity(spec.kinds.len());
    for k in &spec.kinds {
        let n = done(k.kind);
        let share = if completed > 0 { n as f64 / completed as f64 } else { 0.0 };
        let target = spec.target(k.kind);
        let min_share = match (k.rest, k.min_share) {
            (true, _) => None,
            (false, Some(m)) => Some(m),
            (false, None) => Some((target - tolerance(target, completed)).max(0.0)),
        };
        let p90_us = latency.get(k.kind).filter(|l| l.count > 0).map(|l| l.p90_us);
        let p90_ok = match (p90_us, k.p90_limit_us) {
            (Some(p), Some(limit)) => p <= limit,
            _ => true,
        };
        kinds.push(KindShare {
            kind: k.kind.to_string(),
            completed: n,
            share,
            target,
            min_share,
            // Nothing completed at all is below every minimum.
            ok: completed > 0 && min_share.is_none_or(|m| share + 1e-12 >= m),
            p90_us,
            p90_limit_us: k.p90_limit_us,
            p90_ok,
        });
    }
    let gave_up = outcomes.values().map(|o| o.gave_up).sum();
    let per_minute = spec.per_minute.map(|(kind, name)| PerMinute {
        name: name.to_string(),
        kind: kind.to_string(),
        value: if measured_secs > 0.0 { 60.0 * done(kind) as f64 / measured_secs } else { 0.0 },
    });
    MixReport {
        rule: spec.rule.to_string(),
        completed,
        holds: kinds.iter().all(|k| k.ok),
        p90_holds: kinds.iter().all(|k| k.p90_ok),
        kinds,
        gave_up,
        per_minute,
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

fn ms(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else {
        format!("{:.1} ms", us as f64 / 1000.0)
    }
}

impl MixReport {
    /// The `mix:` line's text (without the label): every kind's completed share, then the
    /// verdict, e.g. `new-order 43.48% payment 43.50% ... — minimums met (TPC-C ...)`.
    pub fn line(&self) -> String {
        let shares: Vec<String> = self.kinds.iter().map(|k| format!("{} {}", k.kind, pct(k.share))).collect();
        let below: Vec<String> = self
            .kinds
            .iter()
            .filter(|k| !k.ok)
            .map(|k| format!("{} {} < {}", k.kind, pct(k.share), pct(k.min_share.unwrap_or(0.0))))
            .collect();
        let verdict = if self.holds {
            format!("minimums met ({})", self.rule)
        } else {
            format!("BELOW THE MINIMUMS: {} ({})", below.join(", "), self.rule)
        };
        format!("{} of {} completed — {verdict}", shares.join(" "), self.completed)
    }

    /// The `p90:` line's text: every kind's 90th-percentile response time against its limit.
    pub fn p90_line(&self) -> Option<String> {
        if self.kinds.iter().all(|k| k.p90_limit_us.is_none()) {
            return None;
        }
        let parts: Vec<String> = self
            .kinds
            .iter()
            .map(|k| match (k.p90_us, k.p90_limit_us) {
                (Some(p), Some(l)) => {
                    format!("{} {} (≤ {}{})", k.kind, ms(p), ms(l), if k.p90_ok { "" } else { " EXCEEDED" })
                }
                (None, Some(l)) => format!("{} n/a (≤ {})", k.kind, ms(l)),
                (Some(p), None) => format!("{} {}", k.kind, ms(p)),
                (None, None) => format!("{} n/a", k.kind),
            })
            .collect();
        let verdict = if self.p90_holds { "within the limits" } else { "LIMITS EXCEEDED" };
        Some(format!("{} — {verdict}", parts.join(", ")))
    }
}

/// A deck of cards shared by the clients of a run (see the module doc): deals kinds in a
/// shuffled order, reshuffling a full deck whenever it runs out. Deterministic for a seed and
/// the order the clients ask in.
pub struct Deck {
    state: Mutex<DeckState>,
}

struct DeckState {
    rng: ChaCha8Rng,
    cards: Vec<&'static str>,
    next: usize,
}

impl Deck {
    pub fn new(spec: &MixSpec, seed: u64) -> Deck {
        let mut cards = Vec::with_capacity(spec.cards() as usize);
        for k in &spec.kinds {
            cards.extend(std::iter::repeat_n(k.kind, k.cards as usize));
        }
        assert!(!cards.is_empty(), "a deck needs cards");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // A stream the clients' own generators (streams 0..clients) never use.
        rng.set_stream(u64::MAX);
        let len = cards.len();
        Deck { state: Mutex::new(DeckState { rng, cards, next: len }) }
    }

    /// The next card.
    pub fn deal(&self) -> &'static str {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.next == s.cards.len() {
            let DeckState { rng, cards, .. } = &mut *s;
            cards.shuffle(rng);
            s.next = 0;
        }
        let card = s.cards[s.next];
        s.next += 1;
        card
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tpcc_like() -> MixSpec {
        let k = |kind, cards, min_share: Option<f64>, rest| KindMix {
            kind,
            cards,
            min_share,
            rest,
            p90_limit_us: Some(5_000_000),
        };
        MixSpec {
            rule: "test minimums",
            kinds: vec![
                k("a", 10, None, true),
                k("b", 10, Some(0.43), false),
                k("c", 1, Some(0.04), false),
                k("d", 1, Some(0.04), false),
                k("e", 1, Some(0.04), false),
            ],
            deck: true,
            per_minute: Some(("a", "tpmA")),
        }
    }

    fn outcomes(counts: &[(&str, u64, u64)]) -> BTreeMap<String, Outcomes> {
        counts
            .iter()
            .map(|(k, c, u)| (k.to_string(), Outcomes { committed: *c, user_aborts: *u, ..Outcomes::default() }))
            .collect()
    }

    #[test]
    fn the_mix_verdict_flags_a_kind_below_its_minimum() {
        let spec = tpcc_like();
        let fine = outcomes(&[("a", 990, 10), ("b", 1000, 0), ("c", 100, 0), ("d", 100, 0), ("e", 100, 0)]);
        let r = verdict(&spec, &fine, &BTreeMap::new(), 60.0);
        assert!(r.holds, "{}", r.line());
        assert!(r.line().contains("minimums met"), "{}", r.line());
        assert_eq!(r.per_minute.as_ref().map(|p| p.value), Some(1000.0), "user aborts count as completed");
        // Deliveries (d) starved: 60 of 2,250 is 2.7%.
        let starved = outcomes(&[("a", 1000, 0), ("b", 1000, 0), ("c", 100, 0), ("d", 50, 0), ("e", 100, 0)]);
        let r = verdict(&spec, &starved, &BTreeMap::new(), 60.0);
        assert!(!r.holds);
        assert!(!r.kinds.iter().find(|k| k.kind == "d").unwrap().ok);
        assert!(r.line().contains("BELOW THE MINIMUMS: d 2.22% < 4.00%"), "{}", r.line());
        // Payment (b) just under 43%.
        let b_short = outcomes(&[("a", 1150, 0), ("b", 990, 0), ("c", 100, 0), ("d", 100, 0), ("e", 100, 0)]);
        assert!(!verdict(&spec, &b_short, &BTreeMap::new(), 60.0).holds);
        // Nothing completed is not a mix that holds.
        assert!(!verdict(&spec, &BTreeMap::new(), &BTreeMap::new(), 60.0).holds);
    }

    #[test]
    fn a_kind_without_a_stated_minimum_is_held_to_its_defined_share() {
        let k = |kind, cards| KindMix { kind, cards, min_share: None, rest: false, p90_limit_us: None };
        let spec = MixSpec { rule: "defined shares", kinds: vec![k("x", 1), k("y", 1)], deck: false, per_minute: None };
        let fair = outcomes(&[("x", 5_030, 0), ("y", 4_970, 0)]);
        assert!(verdict(&spec, &fair, &BTreeMap::new(), 1.0).holds);
        let starved = outcomes(&[("x", 6_000, 0), ("y", 4_000, 0)]);
        assert!(!verdict(&spec, &starved, &BTreeMap::new(), 1.0).holds);
    }

    #[test]
    fn the_p90_verdict_compares_each_kind_with_its_limit() {
        let spec = tpcc_like();
        let o = outcomes(&[("a", 1000, 0), ("b", 1000, 0), ("c", 100, 0), ("d", 100, 0), ("e", 100, 0)]);
        let lat =
            |p90_us| LatencySummary { count: 10, mean_us: 0.0, p50_us: 0, p90_us, p95_us: 0, p99_us: 0, max_us: 0 };
        let mut latency: BTreeMap<String, LatencySummary> = BTreeMap::new();
        latency.insert("a".into(), lat(4_000_000));
        latency.insert("d".into(), lat(6_000_000));
        let r = verdict(&spec, &o, &latency, 1.0);
        assert!(!r.p90_holds);
        let line = r.p90_line().unwrap();
        assert!(line.contains("d 6.00 s (≤ 5.00 s EXCEEDED)"), "{line}");
        assert!(line.contains("a 4.00 s (≤ 5.00 s)"), "{line}");
        assert!(line.contains("LIMITS EXCEEDED"), "{line}");
    }

    #[test]
    fn a_deck_deals_exactly_its_cards_per_deck() {
        let spec = tpcc_like();
        let deck = Deck::new(&spec, 7);
        for _ in 0..3 {
            let mut count: BTreeMap<&str, u32> = BTreeMap::new();
            for _ in 0..spec.cards() {
                *count.entry(deck.deal()).or_default() += 1;
            }
            for k in &spec.kinds {
                assert_eq!(count[k.kind], k.cards, "{count:?}");
            }
        }
        let first: Vec<&str> = {
            let d = Deck::new(&spec, 7);
            (0..23).map(|_| d.deal()).collect()
        };
        let again: Vec<&str> = {
            let d = Deck::new(&spec, 7);
            (0..23).map(|_| d.deal()).collect()
        };
        assert_eq!(first, again);
    }
}
