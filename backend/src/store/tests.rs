//! The store against a real SQLite file in a temp dir.

use shared::flags::Flags;
use shared::restart::{
    Durations, Failure, MarkerKind, OpKind, Outcome, Phase, TimelinePoint, Transition,
};

use super::*;

fn flags(tp: &str) -> Flags {
    Flags::from([("--tp".to_owned(), tp.to_owned())])
}

#[tokio::test]
async fn a_restart_round_trips_with_its_timeline() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, rec) = Store::open(dir.path(), 1_000).expect("open");
    assert!(rec.interrupted.is_empty() && rec.instance.is_none() && rec.generation == 0);

    let id = store
        .begin(
            OpKind::Restart,
            "127.0.0.1:5000",
            &flags("8"),
            &flags("4"),
            1_000,
        )
        .await
        .expect("begin");
    store.transition(
        id,
        Transition {
            at_ms: 1_000,
            phase: Phase::Draining,
            note: "SIGTERM".into(),
        },
        Some(MarkerKind::Sigterm),
    );
    for i in 0..5u64 {
        store.point(
            id,
            TimelinePoint {
                at_ms: 1_000 + i * 50,
                phase: Phase::Draining,
                mem_used_bytes: vec![Some(90 << 30), None],
                running_requests: Some(5 - i as u32),
            },
        );
    }
    store.log_tail(id, vec!["line 1".into(), "line 2".into()]);
    store.finish(
        id,
        9_000,
        Outcome::Succeeded,
        None,
        Durations {
            drain_ms: Some(2_000),
            total_ms: Some(8_000),
            ..Durations::default()
        },
    );
    store.flush().await;

    let list = store.restarts(10).await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].outcome, Outcome::Succeeded);
    assert_eq!(list[0].to_flags, flags("4"));
    let d = store.detail(id).await.expect("detail").expect("exists");
    assert_eq!(d.timeline.len(), 5);
    assert_eq!(d.timeline[4].running_requests, Some(1));
    assert_eq!(d.markers[0].kind, MarkerKind::Sigterm);
    assert_eq!(d.log_tail, vec!["line 1".to_owned(), "line 2".to_owned()]);
    assert!(store.detail(id + 1).await.expect("query").is_none());
    assert_eq!(
        store
            .typical()
            .await
            .expect("typical")
            .get(&Phase::Draining),
        Some(&2_000)
    );
}

#[tokio::test]
async fn a_restart_left_running_is_interrupted_on_reopen_and_the_instance_is_found() {
    let dir = tempfile::tempdir().expect("tmp");
    let id = {
        let (store, _) = Store::open(dir.path(), 1_000).expect("open");
        let id = store
            .begin(OpKind::Restart, "peer", &flags("8"), &flags("4"), 1_000)
            .await
            .expect("begin");
        store.instance(Instance {
            generation: 3,
            root: ProcId {
                pid: 4242,
                start_ticks: 99,
            },
            pgid: 4242,
            flags: flags("8"),
            started_at_ms: 500,
            log_path: None,
            origin: shared::restart::Origin::Launched,
            cgroup: Some("/dw/server-3".into()),
        });
        // Its processes, recorded as they are tracked; the same one twice is kept once.
        let worker = |pid| ProcId {
            pid,
            start_ticks: 100,
        };
        store.members(3, vec![worker(4243), worker(4244)]);
        store.members(3, vec![worker(4244), worker(4245)]);
        store.flush().await;
        id
    };
    let (store, rec) = Store::open(dir.path(), 5_000).expect("reopen");
    assert_eq!(rec.interrupted, vec![id]);
    assert_eq!(rec.generation, 3);
    assert_eq!(rec.instance.as_ref().map(|i| i.root.pid), Some(4242));
    let inst = rec.instance.as_ref().expect("the instance");
    assert_eq!(inst.origin, shared::restart::Origin::Launched);
    assert_eq!(inst.cgroup.as_deref(), Some("/dw/server-3"));
    let mut members: Vec<u32> = rec.members.iter().map(|m| m.pid).collect();
    members.sort_unstable();
    assert_eq!(members, vec![4243, 4244, 4245]);
    let s = &store.restarts(5).await.expect("list")[0];
    assert_eq!(s.outcome, Outcome::Interrupted);
    assert_eq!(s.failure, Some(Failure::Interrupted));
    assert_eq!(s.finished_at_ms, Some(5_000));

    store.instance_ended(3, 6_000);
    store.flush().await;
    drop(store);
    let (_, rec) = Store::open(dir.path(), 7_000).expect("reopen");
    assert!(rec.instance.is_none());
    assert!(
        rec.members.is_empty(),
        "an ended instance's processes are no one's"
    );
    assert!(rec.interrupted.is_empty());
}

#[tokio::test]
async fn audit_entries_are_kept_newest_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, _) = Store::open(dir.path(), 0).expect("open");
    for i in 0..3 {
        store.audit(AuditEntry {
            at_ms: i,
            peer: "127.0.0.1:1".into(),
            action: "restart".into(),
            request: "{}".into(),
            outcome: if i == 2 {
                "accepted".into()
            } else {
                "refused".into()
            },
            detail: String::new(),
            count: 1,
            ..Default::default()
        });
    }
    store.flush().await;
    let log = store.audit_log(2, None).await.expect("audit");
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].outcome, "accepted");
}

#[tokio::test]
async fn the_audit_log_keeps_only_the_newest_entries() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, _) = Store::open(dir.path(), 0).expect("open");
    for i in 0..2_000u64 {
        store.audit(AuditEntry {
            at_ms: i,
            peer: "203.0.113.9:1".into(),
            action: "restart".into(),
            request: String::new(),
            outcome: "refused".into(),
            detail: "401: log in first".into(),
            ..Default::default()
        });
    }
    store.flush().await;
    let log = store.audit_log(10_000, None).await.expect("audit");
    assert_eq!(log.len() as i64, super::writer::MAX_AUDIT);
    assert_eq!(log[0].at_ms, 1_999);
    assert_eq!(log.last().map(|a| a.at_ms), Some(500));
}

#[tokio::test]
async fn refusals_are_counted_per_caller_per_minute_and_never_push_out_actions() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, _) = Store::open(dir.path(), 0).expect("open");
    let action = |at_ms| AuditEntry {
        at_ms,
        peer: "olga (10.0.0.5:4000)".into(),
        action: "restart".into(),
        outcome: "accepted as #1".into(),
        ..Default::default()
    };
    let refusal = |at_ms, peer: &str| AuditEntry {
        at_ms,
        peer: peer.into(),
        action: "x".repeat(10_000),
        detail: "401: log in first".into(),
        ..Default::default()
    };
    store.audit(action(1));
    // One caller, two minutes: two rows, every attempt counted.
    for i in 0..5_000u64 {
        store.refused(refusal(60_000 + i * 20, "203.0.113.9"));
    }
    // Many callers: only the newest rows are kept, and no action goes.
    for i in 0..500u64 {
        store.refused(refusal(200_000, &format!("127.0.{}.{}", i / 250, i % 250)));
    }
    store.audit(action(300_000));
    store.flush().await;
    let log = store.audit_log(10_000, None).await.expect("audit");
    let actions: Vec<_> = log.iter().filter(|a| a.kind == AuditKind::Action).collect();
    assert_eq!(
        actions.iter().map(|a| a.at_ms).collect::<Vec<_>>(),
        [300_000, 1]
    );
    let refusals: Vec<_> = log
        .iter()
        .filter(|a| a.kind == AuditKind::Refusals)
        .collect();
    assert_eq!(refusals.len() as i64, super::writer::MAX_REFUSAL_ROWS);
    assert!(
        refusals
            .iter()
            .all(|a| a.action.len() <= super::MAX_AUDIT_TEXT)
    );
    assert!(refusals.iter().all(|a| a.outcome == "refused"));
    drop(store);
    // The one caller's rows went with the oldest; counted, they were all there.
    let (store, _) = Store::open(dir.path(), 0).expect("reopen");
    for i in 0..10u64 {
        store.refused(refusal(400_000 + i, "203.0.113.9"));
    }
    store.flush().await;
    let log = store.audit_log(1, None).await.expect("audit");
    assert_eq!((log[0].count, log[0].last_at_ms), (10, Some(400_009)));
    assert_eq!(log[0].at_ms, 400_000);
}

#[test]
fn cut_strings_end_at_a_character() {
    assert_eq!(super::cut("short", 10), "short");
    let long = "é".repeat(300);
    let c = super::cut(&long, 256);
    assert!(c.len() <= 256 && c.ends_with('…'), "{c}");
}
