//! The page's components, one per file, and `close_button`, the × the modals
//! share. Each reads [`crate::state::AppState`] from context; none touches the
//! socket.

pub(crate) mod bench_bar;
pub(crate) mod campaign_panel;
pub(crate) mod close_button;
pub(crate) mod compare_panel;
pub(crate) mod conn_badge;
pub(crate) mod drain_chart;
pub(crate) mod flag_row;
pub(crate) mod flagset_editor;
pub(crate) mod gpu_card;
pub(crate) mod gpu_grid;
pub(crate) mod header;
pub(crate) mod history_table;
pub(crate) mod kill_list;
pub(crate) mod log_tail;
pub(crate) mod mem_bar;
pub(crate) mod phase_badge;
pub(crate) mod plan_builder;
pub(crate) mod process_row;
pub(crate) mod process_table;
pub(crate) mod restart_detail;
pub(crate) mod restart_dialog;
pub(crate) mod server_panel;
pub(crate) mod sparkline;
pub(crate) mod stage_progress;
pub(crate) mod throughput_view;
