//! Who holds the server besides its operators: the campaign that leased it,
//! and the hub's coordinated restart acting on this node. While either
//! holds, every request that is not the holder's is refused.

use std::time::Instant;

use super::{COORDINATED_HOLD, Lease};

/// A coordinated restart asked to let go of a node another one holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coordinated restart #{held}, not #{asked}, acts on this node")]
pub(super) struct HeldByAnother {
    held: i64,
    asked: i64,
}

/// The server's holders.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The campaign holding the server, if one does.
    lease: Option<Lease>,
    /// The hub's coordinated restart acting on this node, and until when its
    /// hold lasts without a word from the hub.
    coordinated: Option<(i64, Instant)>,
}

impl Holds {
    /// The campaign's lease, if one holds the server.
    pub(super) fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Sets (or ends) the campaign's lease; says whether it changed.
    pub(super) fn set_lease(&mut self, lease: Option<Lease>) -> bool {
        let changed = self.lease != lease;
        self.lease = lease;
        changed
    }

    /// Why a request of the campaign `by` (none: not a campaign's) is refused
    /// under the lease, if it is.
    pub(super) fn leased_to_another(&self, by: Option<i64>) -> Option<String> {
        match &self.lease {
            Some(l) if by != Some(l.campaign_id) => Some(l.refusal()),
            _ => None,
        }
    }

    /// Why a request that is not the coordinated restart `by`'s is refused,
    /// if it is. A hold the hub left for longer than [`COORDINATED_HOLD`]
    /// without a word has lapsed, and is let go here.
    pub(super) fn coordinated_by_another(&mut self, by: Option<i64>) -> Option<String> {
        match self.coordinated {
            Some((_, until)) if Instant::now() > until => {
                tracing::warn!(
                    "the hub's coordinated restart held this node too long without a word: its hold lapsed"
                );
                self.coordinated = None;
                None
            }
            Some((id, _)) if by != Some(id) => Some(format!(
                "coordinated restart #{id} at the hub is acting on this node: wait for it to end, or stop it at the hub"
            )),
            _ => None,
        }
    }

    /// The coordinated restart `id` acts on this node, for
    /// [`COORDINATED_HOLD`] from now (renewed by each of its steps).
    pub(super) fn coordinate(&mut self, id: i64) {
        self.coordinated = Some((id, Instant::now() + COORDINATED_HOLD));
    }

    /// The coordinated restart `id` lets go of this node. Says whether a hold
    /// ended; refuses (with why) when another restart holds it.
    pub(super) fn release(&mut self, id: i64) -> Result<bool, HeldByAnother> {
        match self.coordinated {
            Some((held, _)) if held != id => Err(HeldByAnother { held, asked: id }),
            Some(_) => {
                tracing::info!(id, "the hub's coordinated restart let go of this node");
                self.coordinated = None;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(campaign_id: i64) -> Lease {
        Lease {
            campaign_id,
            name: "night".to_owned(),
            step: 2,
            steps: 8,
        }
    }

    #[test]
    fn a_lease_refuses_all_but_its_campaign() {
        let mut h = Holds::default();
        assert_eq!(h.leased_to_another(None), None);
        assert!(h.set_lease(Some(lease(7))));
        assert!(!h.set_lease(Some(lease(7))), "the same lease is no change");
        assert_eq!(h.leased_to_another(Some(7)), None);
        let why = h.leased_to_another(None).expect("an operator is refused");
        assert!(why.contains("#7") && why.contains("step 2 of 8"), "{why}");
        assert!(
            h.leased_to_another(Some(8)).is_some(),
            "another campaign too"
        );
        assert!(h.set_lease(None));
        assert_eq!(h.leased_to_another(None), None);
    }

    #[test]
    fn a_coordinated_hold_refuses_others_and_is_released_only_by_its_own() {
        let mut h = Holds::default();
        assert_eq!(h.release(3), Ok(false), "nothing held: nothing to release");
        h.coordinate(3);
        assert_eq!(h.coordinated_by_another(Some(3)), None);
        let why = h.coordinated_by_another(None).expect("refused");
        assert!(why.contains("coordinated restart #3"), "{why}");
        let wrong = h.release(4).expect_err("another restart cannot release it");
        assert!(wrong.to_string().contains("#3, not #4"), "{wrong}");
        assert!(h.coordinated_by_another(None).is_some(), "still held");
        assert_eq!(h.release(3), Ok(true));
        assert_eq!(h.coordinated_by_another(None), None);
    }

    #[test]
    fn a_hold_past_its_time_lapses() {
        let mut h = Holds {
            lease: None,
            coordinated: Some((5, Instant::now() - std::time::Duration::from_secs(1))),
        };
        assert_eq!(h.coordinated_by_another(None), None, "lapsed");
        assert_eq!(h.release(5), Ok(false), "and let go");
    }
}
