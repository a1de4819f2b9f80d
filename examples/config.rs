//! Limits from a file, reloaded while the server runs: edit `examples/tollgate.toml`
//! and the server says what changed; a file with a mistake is refused with its line
//! and column, and the limits in force stay.
//!
//! Run with: `cargo run --features config --example config [path/to/limits.toml]`
//! (serves on 127.0.0.1:3000 until Ctrl-C), or with `-- --self-test`: serves on a free
//! port, edits a copy of the file itself, checks the reload through the
//! `RateLimit-Policy` header, and exits.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::Request;
use http_body_util::Full;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer, notify::RecursiveMode};
use support::Demo;
use tokio::sync::mpsc;
use tollgate::config::Limits;
use tollgate::{Policy, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let self_test = std::env::args().any(|arg| arg == "--self-test");
    let given = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tollgate.toml");
    // The self-test edits a copy, never the example file itself.
    let dir = tempfile::tempdir()?;
    let path = match (self_test, given) {
        (true, _) => {
            let copy = dir.path().join("tollgate.toml");
            std::fs::copy(&example, &copy)?;
            copy
        }
        (false, Some(given)) => PathBuf::from(given),
        (false, None) => example,
    };

    let limits = Limits::from_path(&path)?;
    // A clone of the layer shares its limiter and its policies: reloading it reloads
    // the one serving requests.
    let layer = RateLimitLayer::builder()
        .policies(limits.policies().to_vec())
        .build()?;
    let app = Router::new()
        .route(
            "/users",
            get(|| async { "users" }).post(|| async { "created" }),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(layer.clone());

    let reloads = watch(&path, layer, limits)?;
    if self_test {
        let demo = Demo::start(app).await?;
        self_test_run(&demo, &path, reloads).await
    } else {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
        println!(
            "serving on http://127.0.0.1:3000; edit {} to change the limits",
            path.display()
        );
        let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, service).await?;
        Ok(())
    }
}

/// Watches `path` and reloads `layer` when the file changes; each outcome (what
/// changed, or why the file was refused) is printed and sent on the returned channel.
fn watch(
    path: &Path,
    layer: RateLimitLayer,
    limits: Limits,
) -> Result<mpsc::UnboundedReceiver<String>, Box<dyn std::error::Error>> {
    let (changed_tx, mut changed_rx) = mpsc::unbounded_channel();
    let name = path.file_name().map(ToOwned::to_owned);
    let mut debouncer = new_debouncer(
        Duration::from_millis(100),
        move |events: DebounceEventResult| {
            // Other files in the directory (an editor's swap file) are not ours.
            if events
                .is_ok_and(|events| events.iter().any(|e| e.path.file_name() == name.as_deref()))
            {
                let _ = changed_tx.send(());
            }
        },
    )?;
    // The directory, not the file: editors save by writing a new file and renaming it
    // over the old one, and a watch on the old file would see nothing after that.
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    debouncer
        .watcher()
        .watch(&dir, RecursiveMode::NonRecursive)?;

    let (outcome_tx, outcome_rx) = mpsc::unbounded_channel();
    let path = path.to_path_buf();
    tokio::spawn(async move {
        let _debouncer = debouncer; // watching stops when it is dropped
        let mut current = summary(limits.policies());
        let mut applied = std::fs::read_to_string(&path).ok();
        while changed_rx.recv().await.is_some() {
            // A file still being written in place may be cut at a line boundary, and
            // then parses as a shorter file: reload only a text that reads the same
            // twice, 50 ms apart (the next change event brings the rest), and only
            // when it differs from the one in force.
            let Some(text) = settled(&path).await else {
                continue;
            };
            if applied.as_deref() == Some(text.as_str()) {
                continue;
            }
            applied = Some(text);
            let outcome = match Limits::from_path(&path) {
                Err(mistake) => format!("kept the limits in force: {mistake}"),
                Ok(limits) => {
                    let next = summary(limits.policies());
                    // Reloaded even when no quota changed: costs, keys or plans may have.
                    match layer.reload(limits) {
                        Ok(()) => {
                            let before = std::mem::replace(&mut current, next);
                            changes(&before, &current)
                        }
                        Err(refused) => format!("kept the limits in force: {refused}"),
                    }
                }
            };
            println!("{outcome}");
            let _ = outcome_tx.send(outcome);
        }
    });
    Ok(outcome_rx)
}

/// The file's text once two reads 50 ms apart agree; `None` while it is changing or
/// unreadable.
async fn settled(path: &Path) -> Option<String> {
    let first = std::fs::read_to_string(path).ok()?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = std::fs::read_to_string(path).ok()?;
    (first == second).then_some(second)
}

/// What a reload can change that is worth printing: each limit's quota and algorithm.
fn summary(policies: &[Policy]) -> BTreeMap<String, String> {
    policies
        .iter()
        .map(|p| {
            let quota = p.quota();
            (
                p.name().to_owned(),
                format!("{quota} burst {} {}", quota.burst(), p.get_algorithm()),
            )
        })
        .collect()
}

/// One line per added, removed or changed limit.
fn changes(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> String {
    let mut lines = Vec::new();
    for (name, now) in after {
        match before.get(name) {
            None => lines.push(format!("limit added: {name} ({now})")),
            Some(was) if was != now => {
                lines.push(format!("limit changed: {name} ({was} -> {now})"));
            }
            Some(_) => {}
        }
    }
    for name in before.keys().filter(|name| !after.contains_key(*name)) {
        lines.push(format!("limit removed: {name}"));
    }
    if lines.is_empty() {
        lines.push("no quota or algorithm changed (request rules may have)".to_owned());
    }
    format!("reloaded: {}", lines.join("; "))
}

/// Edits the file twice (a quota change, then a mistake) and checks what the server
/// answers after each.
async fn self_test_run(
    demo: &Demo,
    path: &Path,
    mut reloads: mpsc::UnboundedReceiver<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let policy_header = || async {
        let request = Request::get("/users").body(Full::default())?;
        demo.header(request, "ratelimit-policy").await
    };
    let before = policy_header().await?;
    assert!(
        before.contains("\"api\";q=100;w=60"),
        "unexpected policy header {before}"
    );

    println!("RateLimit-Policy: {before}");

    let text = std::fs::read_to_string(path)?;
    std::fs::write(
        path,
        text.replace("quota = \"100/min\"", "quota = \"500/min\""),
    )?;
    next(&mut reloads, "limit changed: api (100/min").await?;
    let after = policy_header().await?;
    println!("RateLimit-Policy: {after}");
    assert!(
        after.contains("\"api\";q=500;w=60"),
        "the reload did not show: {after}"
    );

    std::fs::write(
        path,
        text.replace("quota = \"100/min\"", "quota = \"100/fortnight\""),
    )?;
    next(&mut reloads, ":7:9: invalid quota \"100/fortnight\"").await?;
    let kept = policy_header().await?;
    println!("RateLimit-Policy: {kept}");
    assert_eq!(
        kept, after,
        "a refused file must leave the limits as they were"
    );
    println!("self-test passed");
    Ok(())
}

/// Waits for the watcher's outcome that contains `expected`, passing over others (an
/// editor's save can fire twice).
async fn next(
    reloads: &mut mpsc::UnboundedReceiver<String>,
    expected: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    // Bounded: a watcher that never fires fails the self-test instead of hanging it.
    let wait = async {
        while let Some(outcome) = reloads.recv().await {
            if outcome.contains(expected) {
                return Ok(());
            }
        }
        Err("the watcher stopped")
    };
    Ok(tokio::time::timeout(Duration::from_secs(10), wait).await??)
}
