//! The campaign panel's head as HTML text: the campaign's number, name and
//! state and the operator's buttons. Its buttons carry a `data-act` the panel
//! reads from the click. The rest of the panel is drawn by the agent
//! (`GET /api/campaigns/{id}/view`).

use std::fmt::Write as _;

use shared::campaign::CampaignState;

use crate::markup::escape;

/// A button that says what it does in `data-act`.
fn button(out: &mut String, act: &str, testid: &str, class: &str, text: &str) {
    let _ = write!(
        out,
        r#"<button type="button" class="btn{class}" data-act="{act}" data-testid="{testid}">{text}</button>"#
    );
}

/// The head: the campaign's number, name and state (none yet: nothing),
/// pause, resume and cancel as its state allows, the exports, and for an
/// operator the webhook test and a new campaign.
/// `base`: where the API is (see `crate::base`).
pub(crate) fn head(c: Option<(i64, &str, CampaignState)>, may: bool, base: &str) -> String {
    let mut out = String::from(r#"<h2 class="proc-title">campaign</h2>"#);
    if let Some((id, name, st)) = c {
        let _ = write!(
            out,
            r#"<span class="cpg-name" data-testid="campaign-name">#{id} {}</span><span class="cpg-state" data-testid="campaign-state" data-state="{}">{}</span>"#,
            escape(name),
            st.as_str(),
            st.label()
        );
        if may {
            out.push_str(r#"<span class="cpg-actions">"#);
            if st == CampaignState::Running {
                button(&mut out, "pause", "campaign-pause", "", "Pause");
            }
            if matches!(st, CampaignState::Paused | CampaignState::Pausing) {
                button(&mut out, "resume", "campaign-resume", "", "Resume");
            }
            if !st.is_over() {
                button(
                    &mut out,
                    "cancel",
                    "campaign-cancel",
                    " btn-danger",
                    "Cancel",
                );
            }
            out.push_str("</span>");
        }
        let _ = write!(
            out,
            r#"<span class="proc-spacer"></span><a class="link" href="{base}/api/campaigns/{id}/export.csv" download="">CSV</a><a class="link" href="{base}/api/campaigns/{id}/export.json" download="">JSON</a>"#
        );
    } else {
        out.push_str(r#"<span class="proc-spacer"></span>"#);
    }
    if may {
        button(&mut out, "hooks", "test-webhooks", "", "Test webhooks");
        button(
            &mut out,
            "new",
            "new-campaign",
            " btn-primary",
            "New campaign…",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_offers_what_the_state_allows_to_whoever_may() {
        let h = head(Some((3, "a <b>", CampaignState::Running)), true, "");
        assert!(h.contains("#3 a &lt;b&gt;"), "{h}");
        assert!(h.contains(r#"data-act="pause""#) && h.contains(r#"data-act="cancel""#));
        assert!(!h.contains(r#"data-act="resume""#));
        assert!(h.contains(r#"href="/api/campaigns/3/export.csv""#));
        let hub = head(Some((3, "x", CampaignState::Done)), true, "/agents/gpu-01");
        assert!(hub.contains(r#"href="/agents/gpu-01/api/campaigns/3/export.json""#));
        let paused = head(Some((3, "x", CampaignState::Paused)), true, "");
        assert!(paused.contains(r#"data-act="resume""#) && !paused.contains(r#"data-act="pause""#));
        let done = head(Some((3, "x", CampaignState::Done)), true, "");
        assert!(!done.contains(r#"data-act="cancel""#));
        let viewer = head(Some((3, "x", CampaignState::Running)), false, "");
        assert!(!viewer.contains("data-act"), "{viewer}");
        let none = head(None, true, "");
        assert!(none.contains(r#"data-act="new""#) && !none.contains("campaign-state"));
    }
}
