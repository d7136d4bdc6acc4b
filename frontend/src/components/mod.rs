//! The page's components, one per file. Each reads [`crate::state::AppState`]
//! from context; none touches the socket.

pub(crate) mod conn_badge;
pub(crate) mod gpu_card;
pub(crate) mod gpu_grid;
pub(crate) mod header;
pub(crate) mod mem_bar;
pub(crate) mod process_row;
pub(crate) mod process_table;
pub(crate) mod sparkline;
