//! Private `redis-server` processes for tests: an ephemeral port, a temporary
//! directory, no persistence, killed on drop. Never the server on 6379.
//!
//! The server binary is `redis-server` from `PATH` unless `TOLLGATE_REDIS_SERVER`
//! names another (a path to `valkey-server`, or to an older `redis-server`): the
//! same test binaries run against every server of the matrix in `scripts/test`
//! without being rebuilt. [`server_version`] says which one a test got, for the
//! few tests whose expectations depend on it (functions need Redis 7).
//!
//! Each server runs under a small `sh` watchdog that holds a pipe from the test
//! process: when the test process exits, even without running destructors (servers
//! kept in statics), the pipe closes and the watchdog kills its server.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// One private redis-server.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    extra: Vec<String>,
    envs: Vec<(String, String)>,
    watchdog: Option<Child>,
    pid: u32,
}

/// A port nobody listens on now (and, for cluster nodes, whose bus port +10000 is free).
pub fn free_port(with_bus: bool) -> u16 {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port == 6379 {
            continue;
        }
        if with_bus {
            let Some(bus) = port.checked_add(10_000) else {
                continue;
            };
            if TcpListener::bind(("127.0.0.1", bus)).is_err() {
                continue;
            }
        }
        return port;
    }
    panic!("no free port found");
}

impl RedisServer {
    /// Starts a standalone server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. cluster mode).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// Starts a server with extra arguments and extra environment variables for the
    /// `redis-server` process alone (e.g. `LD_PRELOAD` of a library that fakes its
    /// clock); the watchdog shell does not see them.
    pub fn start_with_env(extra: &[&str], envs: &[(&str, &str)]) -> Self {
        let with_bus = extra.contains(&"--cluster-enabled");
        let dir = tempfile::tempdir().expect("temp dir for redis-server");
        let mut server = Self {
            port: 0,
            dir,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            envs: envs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            watchdog: None,
            pid: 0,
        };
        // A probed port can be taken by someone else before the server binds it: try
        // a few.
        for _ in 0..5 {
            server.port = free_port(with_bus);
            if server.spawn() {
                return server;
            }
            server.kill();
        }
        panic!(
            "{} did not start (is it installed? scripts/test installs it)",
            server_binary()
        );
    }

    /// Starts the server on `self.port`; false if it does not answer within 10 s.
    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let mut args: Vec<String> = Vec::new();
        if !self.envs.is_empty() {
            // `env` sets them and execs the server: same pid, the shell never sees them.
            args.push("env".into());
            args.extend(self.envs.iter().map(|(k, v)| format!("{k}={v}")));
        }
        args.extend([
            server_binary().to_owned(),
            "--port".into(),
            port,
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            self.dir.path().display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--loglevel".into(),
            "warning".into(),
        ]);
        args.extend(self.extra.iter().cloned());
        // `read` returns when the test process's end of the pipe closes.
        let script = "\"$@\" >/dev/null 2>&1 & pid=$!; read _; kill -9 $pid 2>/dev/null; wait";
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (is it installed? scripts/test installs it)");
        self.watchdog = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pid = self.try_command(&["INFO", "server"]).and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse().ok())
            });
            if let Some(pid) = pid {
                self.pid = pid;
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory (a temporary one, removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's process id; 0 once killed.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Runs one command through `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// Sends a raw RESP command over TCP; `None` if the server does not answer.
    fn try_command(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .ok()?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            let _ = write!(request, "${}\r\n{arg}\r\n", arg.len());
        }
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut buf = [0_u8; 4096];
        loop {
            match stream.read(&mut buf) {
                Ok(n) if n > 0 => {
                    reply.extend_from_slice(&buf[..n]);
                    if reply.ends_with(b"\r\n") && reply.len() > 8 {
                        break;
                    }
                }
                _ => break,
            }
        }
        let text = String::from_utf8_lossy(&reply).into_owned();
        (!text.is_empty() && !text.starts_with('-')).then_some(text)
    }

    /// SIGKILL: the server dies at once, connections drop.
    pub fn kill(&mut self) {
        signal("KILL", self.pid);
        self.pid = 0;
        if let Some(mut watchdog) = self.watchdog.take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }

    /// Starts the server again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}",
            self.port
        );
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    pub fn pause(&self) {
        signal("STOP", self.pid);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal("CONT", self.pid);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        signal("CONT", self.pid);
        self.kill();
    }
}

fn signal(name: &str, pid: u32) {
    if pid == 0 {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `redis-cli -p <port> <args>`.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The environment variable that names the server binary the tests start.
pub const SERVER_VARIABLE: &str = "TOLLGATE_REDIS_SERVER";

/// The server binary the tests start: `TOLLGATE_REDIS_SERVER`, or `redis-server`.
pub fn server_binary() -> &'static str {
    static BINARY: OnceLock<String> = OnceLock::new();
    BINARY.get_or_init(|| {
        std::env::var(SERVER_VARIABLE)
            .ok()
            .filter(|path| !path.is_empty())
            .unwrap_or_else(|| "redis-server".to_owned())
    })
}

/// Which server the tests start and its version, read once from `--version`
/// (`Redis server v=7.0.15 …`, `Valkey server v=9.1.2 …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerVersion {
    /// Valkey rather than Redis.
    pub valkey: bool,
    /// (major, minor, patch).
    pub version: (u32, u32, u32),
}

impl ServerVersion {
    /// Whether the server has Redis Functions (`FUNCTION LOAD`, `FCALL`): Redis 7
    /// and later, every Valkey.
    pub fn has_functions(self) -> bool {
        self.valkey || self.version.0 >= 7
    }
}

/// The version of [`server_binary`].
pub fn server_version() -> ServerVersion {
    static VERSION: OnceLock<ServerVersion> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(server_binary())
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("run {} --version: {e}", server_binary()));
        parse_version(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("{} --version: no version in its output", server_binary()))
    })
}

/// Reads `<Name> server v=<major>.<minor>.<patch> …`.
fn parse_version(text: &str) -> Option<ServerVersion> {
    let number = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    let version = (
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    );
    Some(ServerVersion {
        valkey: text.trim_start().to_ascii_lowercase().starts_with("valkey"),
        version,
    })
}

/// `redis-cli -p <port> --user <user> --pass <password> <args>`: a command as an ACL
/// user.
pub fn cli_as(port: u16, user: &str, password: &str, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(["--user", user, "--pass", password, "--no-auth-warning"])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One server shared by every test of a test binary (each test uses its own prefix).
pub fn shared_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// A key prefix no other test in this process uses.
pub fn unique_prefix(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("test{}-{name}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Where the binaries are: the directory of the temp dir, for diagnostics.
pub fn data_dir(server: &RedisServer) -> PathBuf {
    server.dir().to_path_buf()
}

/// Script calls (`FCALL`, `FCALL_RO`, `EVALSHA`, `EVAL`) the server at `port` has run
/// since it started or its statistics were reset: what tollgate's decisions cost it.
pub fn script_calls(port: u16) -> u64 {
    cli(port, &["INFO", "commandstats"])
        .lines()
        .filter(|line| {
            [
                "cmdstat_fcall:",
                "cmdstat_fcall_ro:",
                "cmdstat_evalsha:",
                "cmdstat_eval:",
            ]
            .iter()
            .any(|prefix| line.starts_with(prefix))
        })
        .filter_map(|line| {
            line.split([':', ','])
                .find_map(|f| f.strip_prefix("calls="))
        })
        .filter_map(|calls| calls.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_every_servers_banner() {
        let redis = parse_version("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0");
        assert_eq!(
            redis,
            Some(ServerVersion {
                valkey: false,
                version: (7, 0, 15)
            })
        );
        let old = parse_version("Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64");
        assert!(!old.is_some_and(ServerVersion::has_functions));
        let valkey = parse_version("Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0");
        assert!(valkey.is_some_and(|v| v.valkey && v.has_functions()));
        assert_eq!(parse_version("no version here"), None);
    }
}
