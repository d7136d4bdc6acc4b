//! The gate's pieces: tokens and sessions, login limits, origins and hosts,
//! trusted proxies.

use std::net::IpAddr;

use axum::http::HeaderValue;
use axum::http::header::{COOKIE, HOST, ORIGIN};

use super::login::{LOGIN_FAILURES, LOGIN_FAILURES_ALL};
use super::*;

fn auth() -> (Auth, String, String) {
    let (op, view) = (new_secret().expect("rng"), new_secret().expect("rng"));
    let text = format!(
        "[[token]]\nname = \"op\"\nrole = \"operator\"\nsha256 = \"{}\"\n\
         [[token]]\nname = \"view\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
        hex(&sha256(&op)),
        hex(&sha256(&view))
    );
    (
        Auth::new(AuthConfig::parse(&text).expect("valid")),
        op,
        view,
    )
}

fn peer() -> SocketAddr {
    "10.0.0.5:5000".parse().expect("addr")
}

#[test]
fn bearer_tokens_and_sessions_identify_their_holder() {
    let (a, op, view) = auth();
    let mut h = HeaderMap::new();
    assert!(a.identify(&h, peer()).expect("no creds").is_none());
    h.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {view}")).expect("hv"),
    );
    let c = a.identify(&h, peer()).expect("ok").expect("caller");
    assert_eq!((c.name.as_deref(), c.role), (Some("view"), Role::Viewer));
    assert_eq!(c.who(), "view (10.0.0.5:5000)");
    h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer dw_nope"));
    assert!(a.identify(&h, peer()).is_err());

    let s = a.login(peer().ip(), &op).expect("login");
    let mut h = HeaderMap::new();
    h.insert(
        COOKIE,
        HeaderValue::from_str(&format!("x=1; {COOKIE_NAME}={}", s.id)).expect("hv"),
    );
    let c = a.identify(&h, peer()).expect("ok").expect("caller");
    assert_eq!(c.role, Role::Operator);
    let Via::Session { csrf, .. } = &c.via else {
        panic!("a session")
    };
    assert_eq!(csrf, &s.csrf);
    a.logout(&s.id);
    assert!(a.identify(&h, peer()).expect("ok").is_none());
}

#[test]
fn failed_logins_are_limited_per_address() {
    let (a, op, _) = auth();
    let ip = peer().ip();
    for _ in 0..LOGIN_FAILURES {
        assert_eq!(a.login(ip, "dw_wrong").err(), Some(LoginError::Invalid));
    }
    assert!(matches!(a.login(ip, &op), Err(LoginError::TooMany { .. })));
    // Another address is not held up.
    assert!(a.login("10.0.0.6".parse().expect("ip"), &op).is_ok());
}

#[test]
fn failed_logins_are_limited_for_every_address_together() {
    let (a, op, _) = auth();
    for i in 0..LOGIN_FAILURES_ALL {
        let ip = IpAddr::from([127, 0, (i / 250) as u8, (i % 250) as u8 + 1]);
        assert_eq!(a.login(ip, "dw_wrong").err(), Some(LoginError::Invalid));
    }
    let fresh: IpAddr = "127.9.9.9".parse().expect("ip");
    assert!(matches!(
        a.login(fresh, "dw_wrong"),
        Err(LoginError::TooManyAll { .. })
    ));
    // The flood locks nobody out: a right token still logs in.
    assert!(a.login(fresh, &op).is_ok());
}

#[test]
fn a_token_ends_only_its_own_oldest_sessions() {
    let (a, op, view) = auth();
    let ip = peer().ip();
    let first_op = a.login(ip, &op).expect("login");
    let first_view = a.login(ip, &view).expect("login");
    let mut last = None;
    for _ in 0..SESSIONS_PER_TOKEN * 3 {
        last = Some(a.login(ip, &view).expect("login"));
    }
    let with = |id: &str| {
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("{COOKIE_NAME}={id}")).expect("hv"),
        );
        a.identify(&h, peer()).expect("ok")
    };
    assert!(
        with(&first_op.id).is_some(),
        "another token's session stays"
    );
    assert!(with(&first_view.id).is_none(), "the token's oldest went");
    assert!(with(&last.expect("made").id).is_some());
    let held = a
        .sessions
        .lock()
        .expect("lock")
        .values()
        .filter(|s| s.name == "view")
        .count();
    assert_eq!(held, SESSIONS_PER_TOKEN);
}

#[test]
fn origins_and_hosts() {
    let open = Auth::open();
    let mut h = HeaderMap::new();
    h.insert(HOST, HeaderValue::from_static("127.0.0.1:7878"));
    assert!(open.origin_ok(&h) && open.host_ok(&h));
    h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:7878"));
    assert!(open.origin_ok(&h));
    h.insert(ORIGIN, HeaderValue::from_static("https://evil.example"));
    assert!(!open.origin_ok(&h));
    h.insert(HOST, HeaderValue::from_static("evil.example:7878"));
    assert!(!open.host_ok(&h));
    h.insert(HOST, HeaderValue::from_static("[::1]:7878"));
    assert!(open.host_ok(&h));
    h.insert(HOST, HeaderValue::from_static("localhost"));
    assert!(open.host_ok(&h));
    let with_origin = Auth::new(
        AuthConfig::parse(&format!(
            "public_origin = \"https://gpu.example\"\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
            hex(&sha256("x"))
        ))
        .expect("valid"),
    );
    h.insert(ORIGIN, HeaderValue::from_static("https://gpu.example"));
    assert!(with_origin.origin_ok(&h) && with_origin.secure_cookies());
    assert_eq!(with_origin.cookie_name(), "__Host-drainwatch_session");
    assert_eq!(open.cookie_name(), "drainwatch_session");
    h.insert(ORIGIN, HeaderValue::from_static("http://gpu.example"));
    assert!(!with_origin.origin_ok(&h));
}

#[test]
fn a_trusted_proxy_names_the_client_and_nobody_else_can() {
    let a = Auth::new(
        AuthConfig::parse(&format!(
            "trusted_proxies = [\"127.0.0.1\", \"10.0.0.2\"]\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
            hex(&sha256("x"))
        ))
        .expect("valid"),
    );
    let proxy: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
    let xff = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_str(v).expect("hv"));
        h
    };
    let ip = |s: &str| SocketAddr::new(s.parse().expect("ip"), 0);
    assert_eq!(a.client(proxy, &xff("203.0.113.9")), ip("203.0.113.9"));
    // Through two proxies we trust: the address the outer one saw.
    assert_eq!(
        a.client(proxy, &xff("198.51.100.1, 203.0.113.9, 10.0.0.2")),
        ip("203.0.113.9")
    );
    // An IPv4 proxy seen through a dual-stack listener is still the proxy.
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().expect("addr");
    assert_eq!(a.client(mapped, &xff("203.0.113.9")), ip("203.0.113.9"));
    // A client cannot pose as another by sending the header itself.
    let stranger: SocketAddr = "203.0.113.9:5555".parse().expect("addr");
    assert_eq!(a.client(stranger, &xff("10.9.9.9")), stranger);
    // Nothing, or nonsense, from the proxy: the proxy.
    assert_eq!(a.client(proxy, &HeaderMap::new()), proxy);
    assert_eq!(a.client(proxy, &xff("unknown")), proxy);
    // Without trusted proxies the header means nothing.
    let (plain, _, _) = auth();
    assert_eq!(plain.client(proxy, &xff("203.0.113.9")), proxy);
    let c = Caller {
        name: Some("olga".into()),
        role: Role::Operator,
        via: Via::Bearer,
        peer: ip("203.0.113.9"),
        for_whom: None,
        may_act_for: true,
    };
    assert_eq!(c.who(), "olga (203.0.113.9)");
    let hub = Caller {
        for_whom: Some("alice".into()),
        ..c
    };
    assert_eq!(hub.who(), "olga (203.0.113.9) for alice");
    let mut h = HeaderMap::new();
    assert_eq!(super::for_whom(&h, &hub), Ok(None));
    h.insert(
        super::FOR_HEADER,
        "alice@example.org".parse().expect("a header"),
    );
    assert_eq!(
        super::for_whom(&h, &hub),
        Ok(Some("alice@example.org".into()))
    );
    // A session speaks for itself; so does a token that is not a hub's.
    let session = Caller {
        via: Via::Session {
            id: "s".into(),
            csrf: "c".into(),
        },
        ..hub.clone()
    };
    assert!(super::for_whom(&h, &session).is_err());
    let plain = Caller {
        may_act_for: false,
        ..hub.clone()
    };
    let e = super::for_whom(&h, &plain)
        .expect_err("not a hub's token")
        .to_string();
    assert!(e.contains("hub = true"), "{e}");
    for bad in ["", "a\nb", "x;y", &"a".repeat(65)] {
        if let Ok(v) = bad.parse() {
            h.insert(super::FOR_HEADER, v);
            assert!(super::for_whom(&h, &hub).is_err(), "{bad:?}");
        }
    }
    assert!(
        AuthConfig::parse("trusted_proxies = [\"nginx\"]\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"00\"\n")
            .is_err()
    );
}
