//! A real local Redis Cluster for tests: three masters (optionally one replica
//! each), created with `redis-cli --cluster create`, killed on drop.

use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, cli};

/// A running cluster; its servers are killed when it is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// Every node, masters first as `redis-cli --cluster create` assigned them.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three masters and `replicas` replicas per master.
    pub fn start(replicas: usize) -> Self {
        let count = 3 * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    // Fast failure detection, so the failover test takes seconds.
                    "--cluster-node-timeout",
                    "1000",
                    // Replicas sync at once instead of after the default 5 s.
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(addresses);
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = std::process::Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Self { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok` and agrees on the slots.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .nodes
                .iter()
                .all(|n| cli(n.port(), &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// The URL of every node, for `RedisStore::from_cluster_urls`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The index of the live node that serves `key`'s slot as master.
    pub fn master_of(&self, key: &str) -> usize {
        let live = self
            .nodes
            .iter()
            .find(|n| n.pid() != 0)
            .expect("a live node");
        let slot: u16 = cli(live.port(), &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number");
        // CLUSTER NODES: id addr flags master ping pong epoch state slot-ranges...
        for line in cli(live.port(), &["CLUSTER", "NODES"]).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                match (lo.parse::<u16>(), hi.parse::<u16>()) {
                    (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
                    _ => false,
                }
            });
            if serves {
                let port = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse::<u16>().ok())
                    .expect("a node address");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port() == port)
                    .expect("a node of this cluster");
            }
        }
        panic!("no master serves slot {slot}");
    }
}

/// One three-master cluster shared by every test of a test binary.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(0))
}
