//! One sort for the whole bundle.
//!
//! The standard library's sorts are compiled once per element type and order,
//! about 3.5 KB of wasm each, and the page sorted seven kinds of list. The lists
//! here are a page's rows, so [`sort_by`] orders positions with one stable merge
//! sort that takes its comparison as `dyn`, compiled once, and then moves the
//! elements into place. Maps are built by inserting ([`map_of`]), because
//! collecting into a `BTreeMap` sorts the entries first.

use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Sorts `v` by `cmp`, stably: equal elements keep their order.
pub(crate) fn sort_by<T>(v: &mut Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) {
    let order = positions(v.len(), &|a, b| cmp(&v[a], &v[b]));
    let mut slots: Vec<Option<T>> = v.drain(..).map(Some).collect();
    v.extend(order.iter().filter_map(|&i| slots[i].take()));
}

/// Sorts `v` by `key`, stably.
pub(crate) fn sort_by_key<T, K: Ord>(v: &mut Vec<T>, key: impl Fn(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// Sorts and removes repeats.
pub(crate) fn sort_dedup<T: Ord>(v: &mut Vec<T>) {
    sort_by(v, T::cmp);
    v.dedup();
}

/// A map of `entries`; a later entry for a key replaces an earlier one, as
/// `collect` does.
pub(crate) fn map_of<K: Ord, V>(entries: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    for (k, v) in entries {
        map.insert(k, v);
    }
    map
}

/// `0..n` in the stable order `cmp` gives: a bottom-up merge sort.
fn positions(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut from: Vec<usize> = (0..n).collect();
    let mut into = vec![0; n];
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut l, mut r) = (start, mid);
            for slot in &mut into[start..end] {
                // The left run wins ties: that is what keeps the sort stable.
                let take_left = l < mid && (r >= end || cmp(from[r], from[l]) != Ordering::Less);
                if take_left {
                    *slot = from[l];
                    l += 1;
                } else {
                    *slot = from[r];
                    r += 1;
                }
            }
            start = end;
        }
        std::mem::swap(&mut from, &mut into);
        width *= 2;
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_as_the_standard_library_does_and_stays_stable() {
        // A small generator: every length up to 40, many repeated keys.
        let mut seed = 0x2545_f491_u32;
        for n in 0..40 {
            let v: Vec<(u32, usize)> = (0..n)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed % 7, i)
                })
                .collect();
            let mut ours = v.clone();
            sort_by_key(&mut ours, |e| e.0);
            let mut std = v.clone();
            std.sort_by_key(|e| e.0);
            assert_eq!(ours, std, "n = {n}");
            let mut rev = v.clone();
            sort_by(&mut rev, |a, b| b.0.cmp(&a.0));
            std.sort_by_key(|e| std::cmp::Reverse(e.0));
            assert_eq!(rev, std, "n = {n}, descending");
        }
    }

    #[test]
    fn dedup_and_maps() {
        let mut v = vec![16, 1, 4, 16, 64, 1];
        sort_dedup(&mut v);
        assert_eq!(v, [1, 4, 16, 64]);
        let m = map_of([("b", 1), ("a", 2), ("b", 3)]);
        assert_eq!(m, BTreeMap::from([("a", 2), ("b", 3)]));
    }
}
