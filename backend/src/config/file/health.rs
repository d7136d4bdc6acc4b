//! `[health]`: what the pre-launch health gate does about each reason a GPU
//! may be unfit: `refuse` the launch, `warn` (launch, and say so on the
//! restart), or `ignore`. Throttling is only ever seen under load, so it is
//! a warning on a benchmark run or nothing.
//!
//! ```toml
//! [health]
//! xid = "refuse"        # an XID error since the last successful launch
//! row_remap = "refuse"  # a row remap pending or failed (a page retirement pending)
//! ecc = "refuse"        # an uncorrected ECC error since the last launch
//! pcie = "refuse"       # a link narrower (or, under load, slower) than its max
//! throttle = "warn"     # clocks held down for power or heat during a benchmark
//! ```

use serde::Deserialize;

use crate::config::Problem;
use shared::health::HealthReason;

/// What the gate does about one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Refuse,
    Warn,
    Ignore,
}

/// The gate's policy per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    pub xid: Policy,
    pub row_remap: Policy,
    pub ecc: Policy,
    pub pcie: Policy,
    pub throttle: Policy,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            xid: Policy::Refuse,
            row_remap: Policy::Refuse,
            ecc: Policy::Refuse,
            pcie: Policy::Refuse,
            throttle: Policy::Warn,
        }
    }
}

impl HealthPolicy {
    pub fn of(&self, reason: HealthReason) -> Policy {
        match reason {
            HealthReason::Xid => self.xid,
            HealthReason::RowRemap => self.row_remap,
            HealthReason::Ecc => self.ecc,
            HealthReason::Pcie => self.pcie,
            HealthReason::Throttle => self.throttle,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    xid: Option<Policy>,
    row_remap: Option<Policy>,
    ecc: Option<Policy>,
    pcie: Option<Policy>,
    throttle: Option<Policy>,
}

pub(super) fn check(raw: RawHealth) -> Result<HealthPolicy, Problem> {
    let d = HealthPolicy::default();
    if raw.throttle == Some(Policy::Refuse) {
        return Err(Problem::refused(
            "health.throttle",
            "throttling shows only under load, so it cannot refuse a launch; \
             use \"warn\" or \"ignore\"",
        ));
    }
    Ok(HealthPolicy {
        xid: raw.xid.unwrap_or(d.xid),
        row_remap: raw.row_remap.unwrap_or(d.row_remap),
        ecc: raw.ecc.unwrap_or(d.ecc),
        pcie: raw.pcie.unwrap_or(d.pcie),
        throttle: raw.throttle.unwrap_or(d.throttle),
    })
}
