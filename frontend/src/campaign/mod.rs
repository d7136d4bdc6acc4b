//! The campaign view's parts the page draws itself, pinned down by host
//! tests: the head with the operator's buttons ([`panel`]), the window of
//! step rows ([`rows`]) and the plan builder's model ([`plan`]). The rest of
//! the view is drawn by the agent (`GET /api/campaigns/{id}/view`).

pub(crate) mod panel;
pub(crate) mod plan;
pub(crate) mod rows;
