//! Where this dashboard's API lives: at the root on an agent, or under
//! `/agents/{name}` when a hub serves an agent's dashboard.

use std::sync::OnceLock;

/// The prefix a hub serves an agent's dashboard under, from the page's path:
/// `/agents/gpu-01/…` → `/agents/gpu-01`; anything else → none.
pub(crate) fn prefix_of(pathname: &str) -> &str {
    let Some(rest) = pathname.strip_prefix("/agents/") else {
        return "";
    };
    match rest.split_once('/') {
        Some((name, _)) if !name.is_empty() => &pathname[.."/agents/".len() + name.len()],
        _ => "",
    }
}

/// This page's prefix (empty on an agent itself).
pub(crate) fn base() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = leptos::prelude::window()
            .location()
            .pathname()
            .unwrap_or_default();
        prefix_of(&path).to_owned()
    })
}

/// `path` (`/api/…`, `/ws`) as this page reaches it.
pub(crate) fn url(path: &str) -> String {
    format!("{}{path}", base())
}

/// The agent's name when a hub serves this dashboard.
pub(crate) fn agent() -> Option<&'static str> {
    base().strip_prefix("/agents/")
}

#[cfg(test)]
mod tests {
    use super::prefix_of;

    #[test]
    fn the_prefix_is_the_agent_s_path_at_the_hub() {
        assert_eq!(prefix_of("/agents/gpu-01/"), "/agents/gpu-01");
        assert_eq!(prefix_of("/agents/gpu-01/index.html"), "/agents/gpu-01");
        assert_eq!(prefix_of("/agents/gpu-01"), "");
        assert_eq!(prefix_of("/agents//"), "");
        assert_eq!(prefix_of("/"), "");
        assert_eq!(prefix_of("/fleet"), "");
    }
}
