//! A Redis Cluster of three masters with one replica each.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Certificates;
use crate::ports::free_port;
use crate::server::RedisServer;

/// What makes a server a cluster node.
const NODE_ARGS: [&str; 6] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
];

/// How long the cluster may take to agree that every slot is served.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// A running 3-master/3-replica Redis Cluster; stopped when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _tempdir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts six nodes and joins them with `redis-cli --cluster create --cluster-replicas 1`.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// The same with extra `redis-server` arguments for every node.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut args = NODE_ARGS.to_vec();
        args.extend_from_slice(extra);
        Self::start_nodes(|port, dir| RedisServer::spawn(port, dir, &args), &[])
    }

    /// The same over TLS only: clients, the cluster bus and replication all speak TLS with
    /// `certificates`; the harness reaches each node through a Unix socket.
    pub fn start_tls(certificates: &Certificates) -> Self {
        let ca = certificates.ca.to_str().expect("a UTF-8 path").to_owned();
        let mut tls = NODE_ARGS.to_vec();
        tls.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
        Self::start_nodes(
            |port, dir| RedisServer::spawn_tls(port, dir, &[], certificates, &tls),
            &["--tls", "--cacert", &ca],
        )
    }

    /// Starts six nodes with `node` and joins them; `cli` is what redis-cli needs to reach them.
    fn start_nodes(node: impl Fn(u16, &Path) -> RedisServer, cli: &[&str]) -> Self {
        let tempdir = tempfile::tempdir().expect("a temporary directory for the cluster");
        let nodes: Vec<RedisServer> = (0..6)
            .map(|n| {
                let dir = tempdir.path().join(format!("node-{n}"));
                std::fs::create_dir_all(&dir).expect("a node directory");
                node(free_port(), &dir)
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let output = Command::new("redis-cli")
            .args(cli)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli (installed with redis-server) to create the cluster");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self {
            nodes,
            _tempdir: tempdir,
        };
        cluster.wait_until_formed();
        cluster
    }

    /// Waits until every node reports `cluster_state:ok` and every replica is in sync.
    pub fn wait_until_formed(&self) {
        let started = Instant::now();
        loop {
            let all_ok = self.nodes.iter().all(|node| {
                node.query::<String>(redis::cmd("CLUSTER").arg("INFO"))
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            let replicas_synced = self.nodes.iter().all(|node| {
                node.query::<String>(redis::cmd("INFO").arg("replication"))
                    .is_ok_and(|info| {
                        !info.contains("role:slave") || info.contains("master_link_status:up")
                    })
            });
            if all_ok && replicas_synced {
                return;
            }
            assert!(
                started.elapsed() < FORM_TIMEOUT,
                "the cluster did not form within {FORM_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis://127.0.0.1:<port>` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to kill or stop one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The node currently serving `slot` as master.
    pub fn master_of(&self, slot: u16) -> &RedisServer {
        // Ask any node still answering: a test may have killed some.
        let shards: redis::Value = self
            .nodes
            .iter()
            .find_map(|node| node.query(redis::cmd("CLUSTER").arg("SLOTS")).ok())
            .expect("CLUSTER SLOTS from a living node");
        let redis::Value::Array(ranges) = shards else {
            panic!("unexpected CLUSTER SLOTS reply: {shards:?}")
        };
        for range in ranges {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let (
                Some(redis::Value::Int(first)),
                Some(redis::Value::Int(last)),
                Some(redis::Value::Array(master)),
            ) = (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            if (*first..=*last).contains(&i64::from(slot))
                && let Some(redis::Value::Int(port)) = master.get(1)
                && let Some(node) = self.nodes.iter().find(|n| i64::from(n.port()) == *port)
            {
                return node;
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// The slot `key` hashes to, as the cluster computes it.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes()
            .iter()
            .find_map(|node| {
                node.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
                    .ok()
            })
            .expect("CLUSTER KEYSLOT")
    }
}
