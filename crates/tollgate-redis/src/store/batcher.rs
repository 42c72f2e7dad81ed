//! Coalesces concurrent checks bound for the same place into one script call.
//!
//! A Lua decision costs Redis several times a plain command, so Redis CPU is the ceiling; one
//! call carrying many checks spends it better. Checks enter a queue; a background task takes
//! whatever is waiting when it wakes (up to `max_batch`, grouped by cluster slot and time),
//! sends each group as one call, and goes straight back to the queue without waiting for the
//! reply, so calls overlap on the multiplexed connection. Nothing waits for a batch to fill:
//! a lone check goes out alone and at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::cluster_routing::Slot;
use tokio::sync::{mpsc, oneshot};

use super::connection::{Connection, store_error};
use super::wire::{Part, decode_checks, encode_checks};
use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;
use tollgate_core::store::StoreError;

/// The longest queue of waiting checks; past it, checks fail at once as overloaded.
pub(crate) const QUEUE_CAPACITY: usize = 65_536;

/// What a part's call answers: the call's time and the part's decisions.
pub(crate) type PartReply = Result<(Micros, Vec<Decision>), StoreError>;

/// One part waiting to be sent.
pub(crate) struct Job {
    pub(crate) part: Part,
    pub(crate) slot: Option<Slot>,
    pub(crate) at: Option<Micros>,
    pub(crate) reply: oneshot::Sender<PartReply>,
}

/// Counts of what the batcher sent, for metrics and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) calls: AtomicU64,
    pub(crate) checks: AtomicU64,
}

/// Starts the batcher; it stops when every sender is dropped.
pub(crate) fn spawn(
    connection: Connection,
    script: Arc<Script>,
    max_batch: usize,
    timeout: Duration,
    counters: Arc<Counters>,
) -> mpsc::Sender<Job> {
    let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
    tokio::spawn(run(
        receiver,
        connection,
        script,
        max_batch.max(1),
        timeout,
        counters,
    ));
    sender
}

async fn run(
    mut queue: mpsc::Receiver<Job>,
    connection: Connection,
    script: Arc<Script>,
    max_batch: usize,
    timeout: Duration,
    counters: Arc<Counters>,
) {
    while let Some(first) = queue.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < max_batch {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // A caller that gave up (timed out) no longer needs an answer: do not spend Redis on it.
        jobs.retain(|job| !job.reply.is_closed());
        for group in group_by_destination(jobs) {
            counters.calls.fetch_add(1, Ordering::Relaxed);
            counters
                .checks
                .fetch_add(group.len() as u64, Ordering::Relaxed);
            tokio::spawn(call(
                connection.clone(),
                Arc::clone(&script),
                group,
                timeout,
            ));
        }
    }
}

/// Splits jobs into groups that can share one call: same cluster slot, same explicit time.
fn group_by_destination(jobs: Vec<Job>) -> Vec<Vec<Job>> {
    let mut groups: Vec<Vec<Job>> = Vec::new();
    for job in jobs {
        match groups
            .iter_mut()
            .find(|group| group[0].slot == job.slot && group[0].at == job.at)
        {
            Some(group) => group.push(job),
            None => groups.push(vec![job]),
        }
    }
    groups
}

/// Sends one group as one script call and hands each job its decisions.
async fn call(mut connection: Connection, script: Arc<Script>, jobs: Vec<Job>, timeout: Duration) {
    let (keys, spec) = encode_checks(jobs.iter().map(|job| &job.part));
    let mut invocation = script.prepare_invoke();
    for key in &keys {
        invocation.key(key);
    }
    invocation.arg(jobs[0].at.map_or_else(String::new, |at| at.to_string()));
    invocation.arg(spec);
    let counts: Vec<usize> = jobs.iter().map(|job| job.part.items.len()).collect();
    let outcome = match invocation.invoke_async::<Vec<i64>>(&mut connection).await {
        Ok(reply) => {
            decode_checks(&reply, &counts).map_err(|error| StoreError::Failed(error.to_string()))
        }
        Err(error) => Err(store_error(&error, timeout)),
    };
    match outcome {
        Ok((now, decisions)) => {
            for (job, decisions) in jobs.into_iter().zip(decisions) {
                let _ = job.reply.send(Ok((now, decisions)));
            }
        }
        Err(error) => {
            for job in jobs {
                let _ = job.reply.send(Err(error.clone()));
            }
        }
    }
}
