//! The offline memory tools end to end: a run recorded with `strata train --snapshot
//! --html`, replayed exactly under its own settings and under expandable segments, and its
//! page rendered in headless Chromium (Debian's `chromium`, which the test command
//! installs), with a screenshot saved.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use strata::alloc::offline::{replay, Coverage};
use strata::alloc::Snapshot;
use strata_cli::viz::{viz_window, VizOptions};

fn strata(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("the strata binary runs");
    assert!(
        out.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viz");
    std::fs::create_dir_all(&d).expect("a directory");
    d
}

/// Chromium, headless, as this machine needs it: no sandbox (root), no GPU, no network
/// chatter, a fresh profile.
fn chromium(profile: &Path, args: &[String]) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs (scripts/test installs Debian's chromium)")
}

/// Renders `page`: fails without the page's marker or with its error element, then saves
/// a screenshot to `shot`.
fn render(page: &Path, shot: &Path) {
    render_url(format!("file://{}", page.display()), shot);
}

/// [`render`] for the page at `url`.
fn render_url(url: String, shot: &Path) {
    // One profile per page: tests render in parallel, and a profile admits one browser.
    let stem = shot
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let profile = dir().join(format!("profile-{}-{stem}", std::process::id()));
    let dom = chromium(&profile, &["--dump-dom".into(), url.clone()]);
    let text = String::from_utf8_lossy(&dom.stdout);
    assert!(
        !text.contains("id=\"error\""),
        "the page reported an error: {}",
        text.split("id=\"error\"")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(300)
            .collect::<String>()
    );
    assert!(
        text.contains("id=\"drawn\""),
        "the page did not finish drawing; chromium said: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let _ = std::fs::remove_file(shot);
    chromium(
        &profile,
        &[
            "--window-size=1200,1100".into(),
            format!("--screenshot={}", shot.display()),
            url,
        ],
    );
    let png = std::fs::read(shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    println!("screenshot: {}", shot.display());
}

#[test]
fn a_recorded_run_replays_exactly_and_its_page_renders() {
    let d = dir();
    let (snap, report, page) = (d.join("mlp.pickle"), d.join("mlp.json"), d.join("mlp.html"));
    strata(&[
        "train",
        "--model",
        "mlp",
        "--epochs",
        "1",
        "--train-samples",
        "2048",
        "--test-samples",
        "256",
        "--snapshot",
        snap.to_str().expect("a path"),
        "--html",
        page.to_str().expect("a path"),
        "--report-json",
        report.to_str().expect("a path"),
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("the report")).expect("JSON");
    let recorded = Snapshot::load(&snap).expect("the snapshot reads back");
    let r = replay(&recorded, 0, "expandable_segments:True", None).expect("a replay");
    assert_eq!(r.coverage, Coverage::Complete);
    assert_eq!(
        Some(r.recorded.peak_allocated),
        json["run_peak_allocated"].as_u64(),
        "allocated"
    );
    assert_eq!(
        Some(r.recorded.peak_reserved),
        json["run_peak_reserved"].as_u64(),
        "reserved"
    );
    assert_eq!(r.what_if.peak_requested, r.recorded.peak_requested);
    assert!(r.what_if.ooms.is_empty());
    let table = String::from_utf8_lossy(
        &strata(&[
            "replay",
            snap.to_str().expect("a path"),
            "--alloc-conf",
            "expandable_segments:True",
        ])
        .stdout,
    )
    .into_owned();
    assert!(table.contains("expandable_segments:True"), "{table}");
    assert!(table.contains("peak reserved"), "{table}");
    // A device a third the size runs out of memory, and says where.
    let small = (json["run_peak_allocated"].as_u64().unwrap_or(0) / 3).to_string();
    let table = String::from_utf8_lossy(
        &strata(&[
            "replay",
            snap.to_str().expect("a path"),
            "--capacity",
            &small,
        ])
        .stdout,
    )
    .into_owned();
    assert!(
        table.contains("would run out of memory at entry"),
        "{table}"
    );
    // The page `train --html` wrote, and the one `viz` writes with its PNG.
    render(&page, &d.join("train-page.png"));
    let (viz_page, timeline) = (d.join("viz.html"), d.join("timeline.png"));
    strata(&[
        "viz",
        snap.to_str().expect("a path"),
        "-o",
        viz_page.to_str().expect("a path"),
        "--png",
        timeline.to_str().expect("a path"),
    ]);
    let png = std::fs::read(&timeline).expect("the timeline");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    render(&viz_page, &d.join("viz-page.png"));
}

#[test]
fn a_pytorch_snapshot_renders_too() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../strata-alloc/tests/fixtures/snapshots/pytorch-p4.pickle");
    let d = dir();
    let page = d.join("pytorch.html");
    strata(&[
        "viz",
        fixture.to_str().expect("a path"),
        "-o",
        page.to_str().expect("a path"),
    ]);
    render(&page, &d.join("pytorch-page.png"));
    let out = strata(&["replay", fixture.to_str().expect("a path")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("recorded run"));
}

#[test]
fn every_pytorch_cuda_golden_is_drawn_and_explained() {
    // PyTorch's own CUDA runs (crates/strata-alloc/tests/fixtures/pytorch-cuda/): every
    // offline command reads them; the transformer's page is rendered.
    let goldens =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-alloc/tests/fixtures/pytorch-cuda");
    let d = dir();
    for program in ["mixed", "frag", "streams", "mlp", "gpt", "oom"] {
        for setting in ["default", "expandable"] {
            let name = format!("{program}.{setting}");
            let snapshot = goldens.join(format!("{name}.pickle"));
            let snapshot = snapshot.to_str().expect("a path");
            let page = d.join(format!("cuda-{name}.html"));
            let out = strata(&["viz", snapshot, "-o", page.to_str().expect("a path")]);
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("allocations"),
                "{name}"
            );
            let out = strata(&["explain", snapshot]);
            assert!(!out.stdout.is_empty(), "{name}");
            let out = strata(&["replay", snapshot]);
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("recorded run"),
                "{name}"
            );
        }
    }
    render(
        &d.join("cuda-gpt.default.html"),
        &d.join("cuda-gpt-page.png"),
    );
}

/// `GET path` from the server at `addr`: the status and the body.
fn get(addr: &str, path: &str) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).expect("the server accepts");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("a request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("a response");
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, response[head_end + 4..].to_vec())
}

/// Ends the server when the test does, whether it passes or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_long_trace_is_drawn_from_its_summary_and_served_in_exact_windows() {
    let gpt = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../strata-alloc/tests/fixtures/pytorch-cuda/gpt.default.pickle");
    let gpt = gpt.to_str().expect("a path");
    let d = dir();
    // Written to a file with too many allocations to hold: the summary is drawn.
    let page = d.join("summary.html");
    let out = strata(&[
        "viz",
        gpt,
        "--exact-lives",
        "10",
        "-o",
        page.to_str().expect("a path"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("drawn from its summary"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(&page).expect("the page");
    assert!(text.contains("\"complete\":false"));
    render(&page, &d.join("summary-page.png"));

    // Served: a window holds exactly the allocations of the whole trace that overlap it,
    // those allocated before it among them, and peaks where the whole trace does there.
    let snap = Snapshot::load(gpt).expect("the golden reads");
    let exact = VizOptions {
        exact_lives: usize::MAX,
    };
    let whole = viz_window(&snap, 0, "whole", None, &exact);
    assert!(whole.complete && whole.total_lives > 10);
    let (from, to) = (whole.entries / 4, whole.entries / 2);
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["viz", gpt, "--serve", "--exact-lives", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().expect("its output");
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the address");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the page's address")
        .to_owned();
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let (status, body) = get(addr, &format!("/window?from={from}&to={to}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let window: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(window["offset"], from);
    assert_eq!(window["entries"], to - from);
    let overlapping: Vec<_> = whole
        .lives
        .iter()
        .filter(|l| l.s < to && l.e > from)
        .collect();
    assert_eq!(window["total_lives"], overlapping.len());
    assert!(
        overlapping.iter().any(|l| l.s < from),
        "no block crosses the window's start"
    );
    let live_at = |t: usize| -> u64 {
        overlapping
            .iter()
            .filter(|l| l.s <= t && t < l.e)
            .map(|l| l.b)
            .sum()
    };
    let peak = (from..to).map(live_at).max().unwrap_or(0);
    assert_eq!(window["peak_bytes"], peak);
    assert_eq!(get(addr, "/nothing").0, 404);
    assert_eq!(get(addr, "/window?from=9&to=3").0, 400);
    render_url(url, &d.join("served-page.png"));
    drop(server);
}
