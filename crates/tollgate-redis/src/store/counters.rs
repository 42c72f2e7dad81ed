//! envoyproxy/ratelimit's plain counters (see `tollgate_core::counter`), sent as upstream sends
//! them: `INCRBY` then `EXPIRE` for a counter raised, `GET` for one read. On a single Redis or
//! a Sentinel deployment's master a request's counters go in one pipeline; on a Cluster each
//! key goes in a pipeline of its own, since a pipeline reaches one slot and upstream's keys
//! carry no hash tag. Not a script: a counter is raised even when the request is refused, and
//! the keys are upstream's, byte for byte.

use redis::Pipeline;
use tollgate_core::counter::CounterOp;

/// The commands of `ops`, each answering one count (`EXPIRE`'s answer is dropped).
pub(super) fn pipeline(ops: &[CounterOp<'_>]) -> Pipeline {
    let mut pipe = redis::pipe();
    for op in ops {
        match op.add {
            Some(add) => {
                pipe.cmd("INCRBY")
                    .arg(op.key)
                    .arg(add.hits)
                    .cmd("EXPIRE")
                    .arg(op.key)
                    .arg(add.ttl)
                    .ignore();
            }
            None => {
                pipe.cmd("GET").arg(op.key);
            }
        }
    }
    pipe
}
