//! The HTTP surface as a table: each route's path (as axum reads it), the
//! methods it answers and the query parameters each reads. The agent's and
//! the hub's routers are built from their tables ([`Table`]), so a table is
//! its router; the whole-API walk is derived from them, and [`guard`]
//! refuses a query parameter that a route does not read (one ignored today
//! would be misread the day a route starts reading it).

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde::Serialize;

use super::ApiError;

/// The query parameters a route reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "names")]
pub enum Query {
    /// These names and no others.
    Only(&'static [&'static str]),
    /// Whatever comes, for whoever reads it: an agent behind the hub's
    /// proxy, which checks them itself, or a page's own script (deep links).
    Forwarded,
}

/// Reads no query parameters.
pub const NONE: Query = Query::Only(&[]);

/// One method of one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Route {
    /// As axum reads it: `/api/restarts/{id}`, `/api/{*rest}`.
    pub path: &'static str,
    /// `GET`, `POST`, `PATCH`…, or `*` for every method.
    pub method: &'static str,
    pub query: Query,
}

impl Route {
    /// Whether it answers `method` (a `GET` route answers `HEAD` too).
    fn answers(&self, method: &str) -> bool {
        self.method == "*" || self.method == method || (method == "HEAD" && self.method == "GET")
    }
}

/// A router and the table it is built from, route by route.
pub struct Table<S> {
    router: Router<S>,
    routes: Vec<Route>,
}

impl<S> std::fmt::Debug for Table<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("routes", &self.routes)
            .finish()
    }
}

impl<S: Clone + Send + Sync + 'static> Default for Table<S> {
    fn default() -> Self {
        Self {
            router: Router::new(),
            routes: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Table<S> {
    /// `path`, answered by `handler`, for the methods (and their query
    /// parameters) in `accepts`.
    pub fn route(
        mut self,
        path: &'static str,
        handler: MethodRouter<S>,
        accepts: &[(&'static str, Query)],
    ) -> Self {
        self.routes
            .extend(accepts.iter().map(|&(method, query)| Route {
                path,
                method,
                query,
            }));
        self.router = self.router.route(path, handler);
        self
    }

    /// The table alone.
    pub fn routes(self) -> Vec<Route> {
        self.routes
    }

    /// The router, its query parameters guarded.
    pub fn router(self) -> Router<S> {
        let routes = Arc::new(self.routes);
        self.router
            .route_layer(axum::middleware::from_fn_with_state(routes, guard))
    }
}

/// The longest query parameter name an error quotes.
const QUOTED: usize = 40;

/// Refuses (400) a request whose query string names a parameter its route
/// does not read, saying which it reads.
async fn guard(State(routes): State<Arc<Vec<Route>>>, req: Request, next: Next) -> Response {
    let (Some(path), Some(query)) = (req.extensions().get::<MatchedPath>(), req.uri().query())
    else {
        return next.run(req).await;
    };
    let Some(route) = routes
        .iter()
        .find(|r| r.path == path.as_str() && r.answers(req.method().as_str()))
    else {
        // A method the route does not answer: axum says 405.
        return next.run(req).await;
    };
    let Query::Only(known) = route.query else {
        return next.run(req).await;
    };
    let unknown = form_urlencoded::parse(query.as_bytes())
        .map(|(k, _)| k)
        .find(|k| !known.contains(&k.as_ref()));
    match unknown {
        None => next.run(req).await,
        Some(name) => {
            let name: String = name.chars().take(QUOTED).collect();
            let reads = if known.is_empty() {
                "this route reads none".to_owned()
            } else {
                format!("this route reads {}", known.join(", "))
            };
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown query parameter `{name}`; {reads}"),
            )
            .audited_as("unknown query parameter")
            .into_response()
        }
    }
}
