//! Random data and transaction inputs as TPC-C specifies them (clauses 2.1.6, 4.3.2, 2.4.1,
//! 2.5.1, 2.6.1, 2.7.1, 2.8.1). Every function is a pure function of the `ChaCha8Rng` it is
//! handed, so inputs and loaded rows replay from the seed.

use super::Scale;
use litmus_core::{Decimal, Value};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The run-time constant `C` of NURand(255, 0, 999) (customer last names). Clause 2.1.6.1:
/// `C_RUN - C_LOAD` must be in 65..=119 and not 96 or 112; 223 - 157 = 66.
pub const C_LAST_RUN: u64 = 223;
/// The load-time constant `C` of NURand(255, 0, 999).
pub const C_LAST_LOAD: u64 = 157;
/// The constant `C` of NURand(1023, 1, 3000) (customer ids).
pub const C_ID: u64 = 259;
/// The constant `C` of NURand(8191, 1, 100000) (item ids).
pub const C_OL_I_ID: u64 = 7911;

/// Syllables of customer last names (clause 4.3.2.3).
pub const SYLLABLES: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// A fixed base for the dates the workload writes (seconds; dates are informational only).
pub const DATE_BASE_SECS: i64 = 1_700_000_000;

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x (clause 2.1.6).
pub fn nurand(rng: &mut ChaCha8Rng, a: u64, x: u64, y: u64, c: u64) -> u64 {
    debug_assert!(x <= y);
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
}

/// The last name for a number in 0..=999: three syllables, its decimal digits.
pub fn last_name(n: u64) -> String {
    debug_assert!(n <= 999);
    let n = n as usize;
    [SYLLABLES[n / 100], SYLLABLES[(n / 10) % 10], SYLLABLES[n % 10]].concat()
}

/// Largest last-name number a scale's customers use: 999, or fewer with fewer than 1,000
/// customers per district (customer `c` of the first 1,000 has name number `c - 1`).
pub fn last_name_max(scale: &Scale) -> u64 {
    (scale.customers - 1).min(999)
}

/// Last-name number of customer `c_id` at load: `c - 1` for the first 1,000, NURand(255, 0, 999)
/// with the load constant for the others (clause 4.3.3.1).
pub fn load_last_name_number(rng: &mut ChaCha8Rng, c_id: u64) -> u64 {
    if c_id <= 1000 {
        c_id - 1
    } else {
        nurand(rng, 255, 0, 999, C_LAST_LOAD)
    }
}

/// A last name for a run-time lookup by name (NURand with the run constant).
pub fn run_last_name(rng: &mut ChaCha8Rng, scale: &Scale) -> String {
    last_name(nurand(rng, 255, 0, last_name_max(scale), C_LAST_RUN))
}

/// A run-time customer id: NURand(1023, 1, customers).
pub fn customer_id(rng: &mut ChaCha8Rng, scale: &Scale) -> u64 {
    nurand(rng, 1023, 1, scale.customers, C_ID)
}

/// A run-time item id: NURand(8191, 1, items).
pub fn item_id(rng: &mut ChaCha8Rng, scale: &Scale) -> u64 {
    nurand(rng, 8191, 1, scale.items, C_OL_I_ID)
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// a-string of random length in `min..=max` (clause 4.3.2.2).
pub fn astring(rng: &mut ChaCha8Rng, min: usize, max: usize) -> String {
    let len = rng.gen_range(min..=max);
    (0..len).map(|_| ALNUM[rng.gen_range(0..ALNUM.len())] as char).collect()
}

/// n-string of random length in `min..=max`.
pub fn nstring(rng: &mut ChaCha8Rng, min: usize, max: usize) -> String {
    let len = rng.gen_range(min..=max);
    (0..len).map(|_| char::from(b'0' + rng.gen_range(0..10u8))).collect()
}

/// i_data / s_data: a-string 26..50, 10% of them with "ORIGINAL" at a random position.
pub fn data_with_original(rng: &mut ChaCha8Rng) -> String {
    let mut s = astring(rng, 26, 50);
    if rng.gen_bool(0.1) {
        let at = rng.gen_range(0..=s.len() - 8);
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

/// A zip code: 4 random digits then "11111".
pub fn zip(rng: &mut ChaCha8Rng) -> String {
    nstring(rng, 4, 4) + "11111"
}

/// Money in cents, uniform in `min..=max`.
pub fn money(rng: &mut ChaCha8Rng, min_cents: i64, max_cents: i64) -> Value {
    Value::Decimal(Decimal::from_cents(rng.gen_range(min_cents..=max_cents)))
}

/// A rate with four decimals, uniform in `min..=max` ten-thousandths (taxes, discounts).
pub fn rate(rng: &mut ChaCha8Rng, min: i64, max: i64) -> Value {
    Value::Decimal(Decimal(rng.gen_range(min..=max) * 100))
}

/// A date (seconds) near [`DATE_BASE_SECS`].
pub fn date(rng: &mut ChaCha8Rng) -> i64 {
    DATE_BASE_SECS + rng.gen_range(0..86_400 * 365)
}

/// A warehouse other than `home` (or `home` when there is only one).
pub fn other_warehouse(rng: &mut ChaCha8Rng, scale: &Scale, home: u64) -> u64 {
    if scale.warehouses == 1 {
        return home;
    }
    let w = rng.gen_range(1..scale.warehouses);
    if w >= home {
        w + 1
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut hits = vec![0u32; 3001];
        for _ in 0..200_000 {
            let c = nurand(&mut rng, 1023, 1, 3000, C_ID);
            assert!((1..=3000).contains(&c));
            hits[c as usize] += 1;
        }
        // Non-uniform: the most popular id is drawn far more often than the uniform share.
        let max = *hits.iter().max().unwrap();
        let uniform = 200_000 / 3000;
        assert!(max > 3 * uniform, "max {max}, uniform {uniform}");
        // Small ranges work too (small-scale runs).
        for _ in 0..1000 {
            assert!((1..=30).contains(&nurand(&mut rng, 1023, 1, 30, C_ID)));
            assert!(nurand(&mut rng, 255, 0, 0, C_LAST_RUN) == 0);
        }
    }

    #[test]
    fn last_names_follow_the_syllable_table() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
        assert_eq!(last_name(40), "BARPRESBAR");
    }

    #[test]
    fn load_last_names_are_sequential_for_the_first_thousand() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        assert_eq!(load_last_name_number(&mut rng, 1), 0);
        assert_eq!(load_last_name_number(&mut rng, 1000), 999);
        assert!(load_last_name_number(&mut rng, 2000) <= 999);
        let scale = Scale::new(1, 30, 100).unwrap();
        assert_eq!(last_name_max(&scale), 29);
        for _ in 0..500 {
            let name = run_last_name(&mut rng, &scale);
            let n = (0..=29).find(|&n| last_name(n) == name);
            assert!(n.is_some(), "{name} is no customer's name at 30 customers per district");
        }
    }

    #[test]
    fn strings_and_other_warehouses() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let originals = (0..2000).filter(|_| data_with_original(&mut rng).contains("ORIGINAL")).count();
        assert!((120..300).contains(&originals), "{originals}");
        assert_eq!(zip(&mut rng).len(), 9);
        let scale = Scale::new(3, 30, 100).unwrap();
        for _ in 0..200 {
            let w = other_warehouse(&mut rng, &scale, 2);
            assert!(w == 1 || w == 3);
        }
    }
}
