//! The throughput ledger as the agent draws it for the page
//! (`GET /api/flagsets/view`): what the viewer picked, and the blocks drawn
//! for it as HTML.

use serde::{Deserialize, Serialize};

use crate::campaign::ChosenSet;

/// The sweep chart's drawing box (width, height), in user units: the page
/// sizes the chart's `<svg>` by it before the agent's drawing arrives.
pub const SWEEP_BOX: (f64, f64) = (760.0, 270.0);

/// How the bars are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LedgerSort {
    /// Fastest first at the shown concurrency; sets without a result last.
    #[default]
    Throughput,
    /// As the ledger lists them: first seen first.
    FirstSeen,
}

impl LedgerSort {
    /// The name in the page's query and the view's request.
    pub fn key(self) -> &'static str {
        match self {
            Self::Throughput => "throughput",
            Self::FirstSeen => "first",
        }
    }

    /// From [`Self::key`]; anything else is by throughput.
    pub fn from_key(key: &str) -> Self {
        if key == "first" {
            Self::FirstSeen
        } else {
            Self::Throughput
        }
    }
}

/// The ledger drawn for what the viewer picked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerView {
    /// Sets in the ledger, shown or not.
    pub total: u32,
    /// "3 flag sets", "1 of 3 flag sets".
    pub count: String,
    /// The concurrency shown (the one asked for when the data has it).
    #[serde(default)]
    pub c: Option<u32>,
    /// The baseline (the one asked for when it is a known set).
    #[serde(default)]
    pub baseline: Option<String>,
    /// The top of the tok/s scale: where the target line stands.
    pub scale: f64,
    /// The `<option>`s of the concurrency and the baseline choosers.
    pub c_options: String,
    pub baseline_options: String,
    /// The list's head with the scale's ticks.
    pub head: String,
    /// One row per shown set, in order.
    pub rows: Vec<LedgerRow>,
    /// The sweep chart's `<svg>` content and its legend.
    pub sweep: String,
    pub legend: String,
    /// The two compared sets, when both are in the ledger.
    #[serde(default)]
    pub compared: Option<Compared>,
    /// The running set's span for the server panel.
    pub running_set: String,
}

/// A shown set's row, and what its editor starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRow {
    pub id: String,
    pub html: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

/// Two sets compared: their flags A → B and their results per concurrency
/// (HTML), and each set for "restart with".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    pub a: ChosenSet,
    pub b: ChosenSet,
    pub diff: String,
    pub table: String,
}
