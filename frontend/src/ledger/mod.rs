//! The throughput ledger's parts the page keeps itself, pinned down by host
//! tests: the live line and a run's outcome ([`live`]), the viewer's choices
//! in the page's query ([`query`]), what the page does with the rows the
//! agent drew ([`picks`]) and the benchmark form ([`form`]). The ledger
//! itself is drawn by the agent (`GET /api/flagsets/view`).
//! Nothing here touches signals, the DOM or the network.

pub(crate) mod form;
pub(crate) mod live;
pub(crate) mod picks;
pub(crate) mod query;
