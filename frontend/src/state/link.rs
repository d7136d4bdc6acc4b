//! Where the socket is ([`Link`]) and what the connection badge says about
//! it ([`ConnView`]): live, stale, connecting or reconnecting with a countdown.

/// The last sample is stale when older than this many sampling periods.
const STALE_AFTER_PERIODS: u64 = 3;

/// Where the socket is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Link {
    /// A socket is being opened: `attempt` 0 is the first connection, n the n-th
    /// retry, made after waiting `delay_ms`.
    Connecting { attempt: u32, delay_ms: u64 },
    /// The socket is open since `since_ms` (browser clock).
    Open { since_ms: f64 },
    /// The socket closed; retry number `attempt` starts at `retry_at_ms`, after
    /// `delay_ms`.
    Waiting {
        attempt: u32,
        delay_ms: u64,
        retry_at_ms: f64,
    },
}

/// What the connection badge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnView {
    /// First connection, or an open socket the data has not yet come through.
    Connecting,
    /// Samples arrive.
    Live,
    /// The socket is open but the last data is `age_ms` old.
    Stale { age_ms: u64 },
    /// The socket closed; retry `attempt` after `delay_ms`, `retry_in_ms` from now
    /// (`None` while that retry is connecting).
    Reconnecting {
        attempt: u32,
        delay_ms: u64,
        retry_in_ms: Option<u64>,
    },
}

impl ConnView {
    /// The badge's `data-state`.
    pub(crate) fn state(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Live => "live",
            Self::Stale { .. } => "stale",
            Self::Reconnecting { .. } => "reconnecting",
        }
    }

    /// Decides from the socket, the arrival time of the last data, the clock and
    /// the sampling period.
    pub(crate) fn of(link: Link, last_data_ms: Option<f64>, now_ms: f64, interval_ms: u64) -> Self {
        match link {
            Link::Connecting {
                attempt: 0,
                delay_ms: _,
            } => Self::Connecting,
            Link::Connecting { attempt, delay_ms } => Self::Reconnecting {
                attempt,
                delay_ms,
                retry_in_ms: None,
            },
            Link::Waiting {
                attempt,
                delay_ms,
                retry_at_ms,
            } => Self::Reconnecting {
                attempt,
                delay_ms,
                retry_in_ms: Some(ms_between(now_ms, retry_at_ms)),
            },
            Link::Open { since_ms } => {
                let limit = interval_ms.saturating_mul(STALE_AFTER_PERIODS);
                // Data from before this socket opened does not make it live, but
                // neither does the reconnect itself make it stale.
                let fresh_from = last_data_ms.map_or(since_ms, |t| t.max(since_ms));
                if ms_between(fresh_from, now_ms) > limit {
                    Self::Stale {
                        age_ms: ms_between(last_data_ms.unwrap_or(since_ms), now_ms),
                    }
                } else if last_data_ms.is_some_and(|t| t >= since_ms) {
                    Self::Live
                } else {
                    Self::Connecting
                }
            }
        }
    }
}

/// Milliseconds from `from` to `to`, 0 if `to` is earlier.
fn ms_between(from: f64, to: f64) -> u64 {
    (to - from).max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Link = Link::Open { since_ms: 1000.0 };

    #[test]
    fn first_connection_is_connecting() {
        let link = Link::Connecting {
            attempt: 0,
            delay_ms: 0,
        };
        assert_eq!(ConnView::of(link, None, 0.0, 100), ConnView::Connecting);
        assert_eq!(ConnView::of(OPEN, None, 1100.0, 100), ConnView::Connecting);
    }

    #[test]
    fn live_then_stale_after_three_periods() {
        assert_eq!(
            ConnView::of(OPEN, Some(1200.0), 1500.0, 100),
            ConnView::Live
        );
        assert_eq!(
            ConnView::of(OPEN, Some(1200.0), 5400.0, 100),
            ConnView::Stale { age_ms: 4200 }
        );
        // Open, nothing ever came.
        assert_eq!(
            ConnView::of(OPEN, None, 2000.0, 100),
            ConnView::Stale { age_ms: 1000 }
        );
    }

    #[test]
    fn old_data_after_a_reconnect_is_neither_live_nor_stale_at_once() {
        assert_eq!(
            ConnView::of(OPEN, Some(10.0), 1100.0, 100),
            ConnView::Connecting
        );
        assert_eq!(
            ConnView::of(OPEN, Some(10.0), 1400.0, 100),
            ConnView::Stale { age_ms: 1390 }
        );
    }

    #[test]
    fn reconnecting_counts_down() {
        let link = Link::Waiting {
            attempt: 3,
            delay_ms: 2000,
            retry_at_ms: 5000.0,
        };
        assert_eq!(
            ConnView::of(link, Some(0.0), 4300.0, 100),
            ConnView::Reconnecting {
                attempt: 3,
                delay_ms: 2000,
                retry_in_ms: Some(700)
            }
        );
        assert_eq!(
            ConnView::of(link, None, 6000.0, 100).state(),
            "reconnecting"
        );
    }
}
