//! The space a plan searches: each flag with the values it may take, a point
//! as one value's index per flag, and what each point tried came to.

/// One flag and its values, in the plan's order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Axis {
    pub flag: String,
    /// Canonical values; `None` is the config's own.
    pub values: Vec<Option<String>>,
}

/// The flags a plan varies.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Space {
    pub axes: Vec<Axis>,
    /// Combinations never to run: a point that has each (axis, value) of
    /// one of them is left out.
    #[serde(default)]
    pub excluded: Vec<Vec<(usize, usize)>>,
}

/// One value's index per axis.
pub type Point = Vec<usize>;

impl Space {
    /// How many points the space holds (saturating).
    pub fn size(&self) -> usize {
        (self.axes.iter()).fold(1usize, |n, a| n.saturating_mul(a.values.len()))
    }

    /// The `n`th point in the grid's order (the first flag slowest).
    pub fn nth(&self, mut n: usize) -> Point {
        let mut p = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            let k = a.values.len().max(1);
            p[i] = n % k;
            n /= k;
        }
        p
    }

    /// The grid's index of `p` (the inverse of [`Self::nth`]).
    pub fn index_of(&self, p: &[usize]) -> usize {
        (self.axes.iter().zip(p)).fold(0usize, |n, (a, &v)| {
            n.saturating_mul(a.values.len().max(1)).saturating_add(v)
        })
    }

    /// Whether no exclusion leaves `p` out.
    pub fn allows(&self, p: &[usize]) -> bool {
        !(self.excluded.iter()).any(|ex| ex.iter().all(|&(a, v)| p.get(a) == Some(&v)))
    }

    /// How many points may run: the size less the excluded points (counted
    /// where the space is small enough to walk; else the size).
    pub fn open_size(&self, walkable: usize) -> usize {
        let n = self.size();
        if self.excluded.is_empty() || n > walkable {
            return n;
        }
        (0..n).filter(|&i| self.allows(&self.nth(i))).count()
    }

    /// The flag changes a point stands for.
    pub fn changes(&self, p: &[usize]) -> Vec<(String, Option<String>)> {
        (self.axes.iter().zip(p))
            .map(|(a, &i)| (a.flag.clone(), a.values[i].clone()))
            .collect()
    }
}

/// Why a step gave no score, graded by how strongly it speaks against the
/// sets around it: a set that could not serve at all is worse than one that
/// served wrongly, and that than one that served too slowly for an SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It did not start, ran out of memory, crashed or never became ready.
    Crashed,
    /// It answered the correctness check wrongly.
    Wrong,
    /// It served, but outside a constraint (an SLO's attainment).
    Excluded,
}

impl Failure {
    /// The penalty, as a share of the scores' spread below the worst score.
    pub fn grade(self) -> f64 {
        match self {
            Self::Crashed => 1.0,
            Self::Wrong => 0.6,
            Self::Excluded => 0.3,
        }
    }
}

/// What a step came to: its score (higher is better), or why it has none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Score(f64),
    Failed(Failure),
}

/// A point tried, and what it came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried {
    pub point: Point,
    pub outcome: Outcome,
}

impl Tried {
    pub fn score(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Score(s) => Some(s),
            Outcome::Failed(_) => None,
        }
    }
}

/// The best point tried so far and its score, if any scored.
pub fn incumbent(tried: &[Tried]) -> Option<(usize, f64)> {
    (tried.iter().enumerate())
        .filter_map(|(i, t)| Some((i, t.score()?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_count_in_the_grid_s_order() {
        let s = Space {
            axes: vec![
                Axis {
                    flag: "A".into(),
                    values: vec![Some("0".into()), Some("1".into())],
                },
                Axis {
                    flag: "--b".into(),
                    values: vec![None, Some("4".into()), Some("8".into())],
                },
            ],
            excluded: vec![vec![(0, 1), (1, 2)]],
        };
        assert!(s.allows(&[1, 1]) && !s.allows(&[1, 2]));
        assert_eq!(s.open_size(100), 5);
        assert_eq!(s.size(), 6);
        assert_eq!(s.nth(0), [0, 0]);
        assert_eq!(s.nth(1), [0, 1]);
        assert_eq!(s.nth(5), [1, 2]);
        assert!((0..6).all(|n| s.index_of(&s.nth(n)) == n));
        assert_eq!(
            s.changes(&[1, 0]),
            [("A".into(), Some("1".into())), ("--b".into(), None)]
        );
        let tried = [
            Tried {
                point: vec![0, 0],
                outcome: Outcome::Score(10.0),
            },
            Tried {
                point: vec![1, 1],
                outcome: Outcome::Failed(Failure::Crashed),
            },
            Tried {
                point: vec![0, 1],
                outcome: Outcome::Score(12.0),
            },
        ];
        assert_eq!(incumbent(&tried), Some((2, 12.0)));
    }
}
