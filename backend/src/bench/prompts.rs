//! The prompts a benchmark sends: random token-like words (deterministic per
//! seed), a dataset's prompts in a seeded order, or random ones behind one of a
//! few shared prefixes; each made when it is sent.

use std::fmt::Write as _;
use std::sync::Arc;

/// `n` distinct prompts of `len` token-like words (deterministic per seed),
/// each made when it is sent: a run holds only the prompts in flight, however
/// many it sends. Or prompts from a dataset (in a seeded order), or random
/// ones behind one of a few shared prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompts {
    n: u32,
    len: u32,
    seed: u64,
    source: Source,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Random,
    Dataset(Arc<super::dataset::Dataset>),
    /// `groups` system prompts of `len` words; prompt i has group i mod groups.
    SharedPrefix {
        groups: u32,
        len: u32,
    },
}

/// splitmix64: a well-mixed 64-bit value from a seed and an index.
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `len` words `w0`…`w49999` from a xorshift64 started at `start`.
fn words(out: &mut String, start: u64, len: u32) {
    let mut x = start | 1;
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(out, "w{}", x % 50_000);
    }
}

/// `n` words of the kind every random prompt is made of, for
/// [`super::sizing`] to count.
pub fn calibration_text(n: u32) -> String {
    let mut out = String::with_capacity(n as usize * 7);
    words(&mut out, mix(0xca1b_4a7e, u64::from(n)), n);
    out
}

impl Prompts {
    /// `n` prompts of `len` words (see [`super::sizing`] for how many words
    /// make a length in tokens).
    pub fn new(n: u32, len: u32, seed: u64) -> Self {
        Self {
            n,
            len,
            seed,
            source: Source::Random,
        }
    }

    /// `n` prompts drawn from `dataset`, in an order the seed decides.
    pub fn from_dataset(n: u32, dataset: Arc<super::dataset::Dataset>, seed: u64) -> Self {
        Self {
            source: Source::Dataset(dataset),
            ..Self::new(n, 0, seed)
        }
    }

    /// `n` random prompts of `len` words, each behind one of `groups` shared
    /// prefixes of `prefix_len` words.
    pub fn shared_prefix(n: u32, len: u32, groups: u32, prefix_len: u32, seed: u64) -> Self {
        Self {
            source: Source::SharedPrefix {
                groups: groups.max(1),
                len: prefix_len,
            },
            ..Self::new(n, len, seed)
        }
    }

    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Prompt `i`, and its output length where the dataset gives one.
    pub fn get(&self, i: usize) -> (String, Option<u32>) {
        match &self.source {
            Source::Random => {
                let mut out = String::with_capacity(self.len as usize * 7);
                words(&mut out, mix(self.seed, i as u64), self.len);
                (out, None)
            }
            Source::Dataset(d) => {
                let e = &d.entries[(mix(self.seed, i as u64) % d.entries.len() as u64) as usize];
                (e.prompt.clone(), e.output_len)
            }
            Source::SharedPrefix { groups, len } => {
                let group = i as u64 % u64::from(*groups);
                let mut out = String::with_capacity((self.len + len) as usize * 7);
                // The prefix depends on the group (and the run's seed) only.
                words(&mut out, mix(self.seed ^ 0x5eed, group), *len);
                words(&mut out, mix(self.seed, i as u64), self.len);
                (out, None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefix_prompts_share_their_group_s_prefix_only() {
        let p = Prompts::shared_prefix(6, 4, 2, 10, 9);
        let prefix = |s: &str| s.split(' ').take(10).collect::<Vec<_>>().join(" ");
        let (a, b, c) = (p.get(0).0, p.get(1).0, p.get(2).0);
        assert_eq!(a.split(' ').count(), 14);
        assert_eq!(prefix(&a), prefix(&c), "group 0");
        assert_ne!(prefix(&a), prefix(&b), "groups 0 and 1");
        assert_ne!(a, c, "each its own suffix");
        // A dataset's prompts, in a seeded order, with their output lengths.
        let d = std::sync::Arc::new(crate::bench::dataset::Dataset {
            name: "d".into(),
            sha256: String::new(),
            entries: vec![
                crate::bench::dataset::Entry {
                    prompt: "x".into(),
                    output_len: Some(3),
                },
                crate::bench::dataset::Entry {
                    prompt: "y".into(),
                    output_len: None,
                },
            ],
        });
        let p = Prompts::from_dataset(20, d, 1);
        let got: Vec<(String, Option<u32>)> = (0..20).map(|i| p.get(i)).collect();
        assert!(got.contains(&("x".into(), Some(3))) && got.contains(&("y".into(), None)));
    }

    #[test]
    fn prompts_are_distinct_and_sized() {
        let p = Prompts::new(3, 5, 42);
        assert_eq!(p.len(), 3);
        assert_eq!(p.get(0).0.split(' ').count(), 5);
        assert_ne!(p.get(0), p.get(1));
        assert_eq!(p.get(2), Prompts::new(3, 5, 42).get(2));
        assert_ne!(p.get(0), Prompts::new(3, 5, 43).get(0));
    }
}
