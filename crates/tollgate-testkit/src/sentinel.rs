//! A Redis Sentinel deployment: one master, one replica and three sentinels watching them,
//! quick to fail over (the master counts as down after one second of silence).

use std::time::{Duration, Instant};

use crate::{Certificates, RedisServer};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "tollgate-master";

/// The data nodes' password in a TLS group.
pub const DATA_PASSWORD: &str = "data-s3cret";

/// The sentinels' password in a TLS group.
pub const SENTINEL_PASSWORD: &str = "sentinel-s3cret";

/// How long forming the group (replica in sync, sentinels aware of each other) may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// A master, its replica and three sentinels, all stopped when dropped.
#[derive(Debug)]
pub struct RedisSentinels {
    /// The first master; after a failover, the replica is the master.
    pub master: RedisServer,
    /// The master's replica.
    pub replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinels {
    /// Starts the group and waits until it can fail over: the replica in sync, and every
    /// sentinel aware of the replica and of the two other sentinels.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// The same over TLS only (clients, replication and the sentinels' own connections), with
    /// passwords: [`DATA_PASSWORD`] on the master and replica, [`SENTINEL_PASSWORD`] on the
    /// sentinels.
    pub fn start_tls(certificates: &Certificates) -> Self {
        Self::start_with(Some(certificates))
    }

    fn start_with(certificates: Option<&Certificates>) -> Self {
        let data_node = |extra: &[&str]| match certificates {
            Some(certificates) => {
                let mut tls = vec![
                    "--tls-replication",
                    "yes",
                    "--requirepass",
                    DATA_PASSWORD,
                    "--masterauth",
                    DATA_PASSWORD,
                ];
                tls.extend_from_slice(extra);
                RedisServer::start_tls(certificates, &tls)
            }
            None => RedisServer::start_with(extra),
        };
        let master = data_node(&[]);
        let master_port = master.port().to_string();
        let replica = data_node(&["--replicaof", "127.0.0.1", &master_port]);
        let mut config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n"
        );
        let mut sentinel_args: Vec<&str> = Vec::new();
        if certificates.is_some() {
            config.push_str(&format!(
                "tls-replication yes\nsentinel auth-pass {MASTER_NAME} {DATA_PASSWORD}\n"
            ));
            sentinel_args.extend(["--requirepass", SENTINEL_PASSWORD]);
        }
        let sentinels = (0..3)
            .map(|_| RedisServer::start_sentinel(&config, certificates, &sentinel_args))
            .collect();
        let group = Self {
            master,
            replica,
            sentinels,
        };
        group.wait_until_formed();
        group
    }

    /// `redis://127.0.0.1:<port>` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// `rediss://:<sentinel password>@127.0.0.1:<port>` of each sentinel of a TLS group.
    pub fn sentinel_tls_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|sentinel| {
                format!(
                    "rediss://:{SENTINEL_PASSWORD}@127.0.0.1:{}",
                    sentinel.port()
                )
            })
            .collect()
    }

    /// The master's port as the first sentinel that answers reports it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|sentinel| {
            let address: Vec<String> = sentinel
                .query(
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(MASTER_NAME),
                )
                .ok()?;
            address.get(1)?.parse().ok()
        })
    }

    fn wait_until_formed(&self) {
        let started = Instant::now();
        while !self.is_formed() {
            assert!(
                started.elapsed() < FORM_TIMEOUT,
                "the sentinel group did not form within {FORM_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn is_formed(&self) -> bool {
        let in_sync = self
            .replica
            .query::<String>(redis::cmd("INFO").arg("replication"))
            .is_ok_and(|info| info.contains("master_link_status:up"));
        in_sync
            && self.sentinels.iter().all(|sentinel| {
                let count = |what: &str| {
                    sentinel
                        .query::<Vec<redis::Value>>(
                            redis::cmd("SENTINEL").arg(what).arg(MASTER_NAME),
                        )
                        .map_or(0, |found| found.len())
                };
                count("REPLICAS") == 1 && count("SENTINELS") == 2
            })
    }
}
