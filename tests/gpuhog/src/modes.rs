//! Misbehaviour, chosen per launch by `GPUHOG_MODE` (comma-separated, so a
//! restart's environment flag can pick it). The names and meanings are the
//! simulated server's (`SIMSERVER_MODE`) for the modes a GPU-holding server
//! can show; any other name is refused rather than ignored.

use std::time::Duration;

/// The variable workers inherit, so they see the launcher's modes.
pub(crate) const ENV: &str = "GPUHOG_MODE";

/// The modes of one launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    /// Launcher and workers ignore SIGTERM: only SIGKILL ends them.
    pub(crate) ignore_sigterm: bool,
    /// Rank 0 leaves a process in a session of its own that ignores SIGTERM
    /// and holds GPU memory: the leftover that makes the next launch run out
    /// of memory.
    pub(crate) orphan: bool,
    /// This long after it is ready, rank 0 leaves a process that setsids and
    /// double-forks (nobody's descendant once its parent is gone) and holds
    /// GPU memory.
    pub(crate) escape_after: Option<Duration>,
}

impl Modes {
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::parse(&std::env::var(ENV).unwrap_or_default())
    }

    /// `"orphan,ignore-sigterm"`, `"escape=1500"`; `normal` or empty is none.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut m = Self::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (item, None),
            };
            match (name, value) {
                ("normal", None) => {}
                ("ignore-sigterm", None) => m.ignore_sigterm = true,
                ("orphan", None) => m.orphan = true,
                ("escape", None) => m.escape_after = Some(Duration::from_millis(1_000)),
                ("escape", Some(v)) => {
                    let ms = v
                        .parse()
                        .map_err(|_| format!("{ENV}: `{item}` needs milliseconds"))?;
                    m.escape_after = Some(Duration::from_millis(ms));
                }
                (other, _) => {
                    return Err(format!(
                        "{ENV}: unknown mode `{other}` (gpuhog knows normal, ignore-sigterm, \
                         orphan, escape[=ms])"
                    ));
                }
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_simulated_servers_names() {
        let m = Modes::parse("orphan, ignore-sigterm").expect("valid");
        assert!(m.orphan && m.ignore_sigterm && m.escape_after.is_none());
        assert_eq!(Modes::parse("normal").expect("valid"), Modes::default());
        assert_eq!(Modes::parse("").expect("valid"), Modes::default());
        assert_eq!(
            Modes::parse("escape").expect("valid").escape_after,
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            Modes::parse("escape=2500").expect("valid").escape_after,
            Some(Duration::from_millis(2500))
        );
        assert!(Modes::parse("escape=soon").is_err());
        assert!(Modes::parse("slow-drain").is_err());
        assert!(Modes::parse("orphan=1").is_err());
    }
}
