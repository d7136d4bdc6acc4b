//! The viewer's choices as the page's query keeps them
//! (`?c=16&baseline=…&compare=A,B&sort=first&target=1200`), so a reload or a
//! shared link shows the same: reading each value, and the parameters that
//! write them back (a default is left out).

use crate::deeplink;
use shared::bench::LedgerSort as Sort;

/// The target line's default, in output tok/s.
pub(crate) const DEFAULT_TARGET: f64 = 1000.0;

/// "16" from a query value, if it is a concurrency.
pub(crate) fn parse_c(v: &str) -> Option<u32> {
    v.parse().ok().filter(|c| *c > 0)
}

/// The target from a query or storage value, if it is a positive number.
pub(crate) fn parse_target(v: &str) -> Option<f64> {
    shared::decimal::parse_f64(v.trim()).filter(|t| t.is_finite() && *t > 0.0)
}

/// "A,B" from a query value: at most two set ids.
pub(crate) fn parse_compare(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
        .take(2)
        .map(str::to_owned)
        .collect()
}

/// What the viewer chose.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choices {
    /// The concurrency asked for (shown when the data has it).
    pub(crate) c: Option<u32>,
    /// The baseline asked for (used when it is a known set).
    pub(crate) baseline: Option<String>,
    /// The sets ticked for the comparison, at most two.
    pub(crate) compare: Vec<String>,
    pub(crate) sort: Sort,
    /// The target line; `None` when the query has none.
    pub(crate) target: Option<f64>,
}

impl Choices {
    /// The choices a query string holds; what it lacks, or cannot be read,
    /// is left to the defaults.
    pub(crate) fn from_query(search: &str) -> Self {
        let q = |k: &str| deeplink::param(search, k);
        Self {
            c: q("c").and_then(|v| parse_c(&v)),
            baseline: q("baseline").filter(|v| !v.is_empty()),
            compare: q("compare").map(|v| parse_compare(&v)).unwrap_or_default(),
            sort: q("sort").map_or(Sort::Throughput, |v| Sort::from_key(&v)),
            target: q("target").and_then(|v| parse_target(&v)),
        }
    }

    /// The query parameters that keep these choices; a default one is
    /// removed (`None`).
    pub(crate) fn to_query(&self) -> [(&'static str, Option<String>); 5] {
        [
            ("c", self.c.map(|c| c.to_string())),
            ("baseline", self.baseline.clone()),
            (
                "compare",
                (!self.compare.is_empty()).then(|| self.compare.join(",")),
            ),
            (
                "sort",
                (self.sort == Sort::FirstSeen).then(|| "first".to_owned()),
            ),
            (
                "target",
                self.target
                    .filter(|t| *t != DEFAULT_TARGET)
                    .map(|t| t.to_string()),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values() {
        assert_eq!(parse_c("16"), Some(16));
        assert_eq!(parse_c("0"), None);
        assert_eq!(parse_target("1200"), Some(1200.0));
        assert_eq!(parse_target("-1"), None);
        assert_eq!(parse_compare("aaa,bbb,ccc"), ["aaa", "bbb"]);
        assert_eq!(parse_compare("a<b,c"), ["c"]);
    }

    #[test]
    fn choices_go_through_the_query_and_back() {
        let ch = Choices::from_query(
            "?detail=3&c=16&baseline=aaa&compare=aaa,bbb&sort=first&target=1200",
        );
        assert_eq!(
            ch,
            Choices {
                c: Some(16),
                baseline: Some("aaa".to_owned()),
                compare: vec!["aaa".to_owned(), "bbb".to_owned()],
                sort: Sort::FirstSeen,
                target: Some(1200.0),
            }
        );
        let search = ch
            .to_query()
            .iter()
            .fold("?detail=3".to_owned(), |s, (k, v)| {
                deeplink::with_param(&s, k, v.as_deref())
            });
        assert_eq!(Choices::from_query(&search), ch);
        let none = Choices::from_query("?c=x&baseline=&sort=?");
        assert_eq!(
            (none.c, none.baseline.as_deref(), none.sort, none.target),
            (None, None, Sort::Throughput, None)
        );
        let defaults = Choices {
            target: Some(DEFAULT_TARGET),
            ..none
        };
        assert!(defaults.to_query().iter().all(|(_, v)| v.is_none()));
    }
}
