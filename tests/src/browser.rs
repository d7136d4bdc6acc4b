//! Headless Chromium driven through Debian's chromedriver (WebDriver, fantoccini).
//! Paths come from `DRAINWATCH_CHROMIUM` / `DRAINWATCH_CHROMEDRIVER` (set by
//! `cargo xtask test`), else Debian's locations.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fantoccini::{Client, ClientBuilder, Locator};

use crate::Proc;

/// Flags that keep Chromium quiet and fast on a closed network.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1100",
];

/// A browser session; dropping it stops chromedriver and Chromium.
#[derive(Debug)]
pub struct Browser {
    pub client: Client,
    _driver: Proc,
    _profile: tempfile::TempDir,
}

fn path_from_env(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

fn free_port() -> anyhow::Result<u16> {
    crate::ports::claim()
}

impl Browser {
    pub async fn start() -> anyhow::Result<Self> {
        let chromium = path_from_env("DRAINWATCH_CHROMIUM", "/usr/bin/chromium");
        let driver_bin = path_from_env("DRAINWATCH_CHROMEDRIVER", "/usr/bin/chromedriver");
        anyhow::ensure!(
            chromium.exists() && driver_bin.exists(),
            "Chromium or chromedriver missing ({}, {}): `cargo xtask test` installs them",
            chromium.display(),
            driver_bin.display()
        );
        let port = free_port()?;
        let driver = Proc::spawn(
            Command::new(&driver_bin)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        let profile = tempfile::tempdir()?;
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let conn =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps.clone())
                    .connect(&format!("http://127.0.0.1:{port}"))
                    .await;
            match conn {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).context("starting Chromium through chromedriver"),
            }
        };
        Ok(Self {
            client,
            _driver: driver,
            _profile: profile,
        })
    }

    /// Waits until `css` matches at least `n` elements; returns how many match.
    pub async fn wait_count(
        &self,
        css: &str,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.client.find_all(Locator::Css(css)).await?.len();
            if found >= n {
                return Ok(found);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?}: {found} of {n} elements match `{css}`");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the first element matching `css` as a person would: scrolled to
    /// the middle of the window (WebDriver leaves an element that is "in
    /// view" where it is, which can be under the sticky top bar), then once
    /// it is still (the same box for two animation frames) and it, not
    /// something over it, is what the click lands on — the checks a browser
    /// automation library makes before it acts. The check and the click run
    /// in one task of the page, so nothing moves between them. An element
    /// that never settles, or stays covered, fails after five seconds, naming
    /// what covers it.
    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        const SCRIPT: &str = r#"
            const el = arguments[0], done = arguments[arguments.length - 1];
            window.addEventListener('error', (e) => done('the page threw: ' + e.message), {once: true});
            const deadline = performance.now() + 5000;
            el.scrollIntoView({block: 'center'});
            const box = () => { const r = el.getBoundingClientRect(); return [r.x, r.y, r.width, r.height].join(','); };
            let last = box(), still = 0;
            const tick = () => {
                const now = box();
                still = now === last ? still + 1 : 0;
                last = now;
                const r = el.getBoundingClientRect();
                const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                if (still >= 2 && hit && (hit === el || el.contains(hit))) {
                    if (typeof el.click === 'function') {
                        el.click();
                    } else {
                        // An SVG element has no click(): the event a person's click sends.
                        el.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true,
                            view: window, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2}));
                    }
                    done(null);
                } else if (performance.now() > deadline) {
                    done(still < 2 ? 'it never stood still' : 'it is covered by ' + (hit ? hit.outerHTML.slice(0, 120) : 'nothing'));
                } else {
                    requestAnimationFrame(tick);
                }
            };
            requestAnimationFrame(tick);
        "#;
        let el = self.client.find(Locator::Css(css)).await?;
        let why = self
            .client
            .execute_async(SCRIPT, vec![serde_json::to_value(&el)?])
            .await?;
        match why.as_str() {
            None => Ok(()),
            Some(why) => bail!("cannot click `{css}`: {why}"),
        }
    }

    /// Focuses the first element matching `css` and presses `key` (a
    /// WebDriver key, such as `'\u{E007}'` for Enter) as a keyboard does: a
    /// real key down and up to whatever has the focus.
    pub async fn press(&self, css: &str, key: char) -> anyhow::Result<()> {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        let el = self.client.find(Locator::Css(css)).await?;
        self.client
            .execute(
                "arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();",
                vec![serde_json::to_value(&el)?],
            )
            .await?;
        let keys = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
        self.client.perform_actions(keys).await?;
        Ok(())
    }

    /// Types `text` into the first field matching `css`, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let el = self.client.find(Locator::Css(css)).await?;
        el.clear().await?;
        el.send_keys(text).await?;
        Ok(())
    }

    /// The text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> anyhow::Result<String> {
        Ok(self.client.find(Locator::Css(css)).await?.text().await?)
    }

    /// An attribute of the first element matching `css`.
    pub async fn attr(&self, css: &str, name: &str) -> anyhow::Result<Option<String>> {
        let el = self.client.find(Locator::Css(css)).await?;
        Ok(el.attr(name).await?)
    }

    /// Waits until an attribute of `css` satisfies `pred`; returns its value.
    pub async fn wait_attr(
        &self,
        css: &str,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Ok(Some(v)) = self.attr(css, name).await {
                if pred(&v) {
                    return Ok(v);
                }
                last = Some(v);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting on {css} [{name}] (last: {last:?})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until an element's text satisfies `pred`.
    pub async fn wait_text(
        &self,
        el: &fantoccini::elements::Element,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let t = el.text().await?;
            if pred(&t) {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting on text (last: {t:?})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until an element is enabled.
    pub async fn wait_enabled(
        &self,
        el: &fantoccini::elements::Element,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !el.is_enabled().await? {
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for an element to be enabled");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Saves a PNG screenshot under `target/screenshots/`.
    pub async fn screenshot(&self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self.client.screenshot().await?;
        let dir = crate::bin_dir().join("../screenshots");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }
}
