//! One connection type over a single Redis and a Redis Cluster, both multiplexed: every
//! clone shares the same sockets and concurrent commands are pipelined, so no check waits for
//! another's round trip. Both reconnect by themselves after a connection is lost.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::store::StoreError;

/// A single Redis (through a reconnecting manager) or a Redis Cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Node(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Node(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// A Redis error as a store error: timeouts, unreachable or failing-over servers, and errors the
/// server or a script reported.
pub(crate) fn store_error(error: &redis::RedisError, timeout: std::time::Duration) -> StoreError {
    if error.is_timeout() {
        StoreError::Timeout(timeout)
    } else if error.is_connection_refusal()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_cluster_error()
        || error.is_unrecoverable_error()
    {
        StoreError::Unavailable(error.to_string())
    } else {
        StoreError::Failed(error.to_string())
    }
}
