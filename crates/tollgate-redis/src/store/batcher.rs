//! Coalesces concurrent checks bound for the same place into one script call.
//!
//! A Lua decision costs Redis several times a plain command, and every call costs Redis about
//! as much again before its first decision, so Redis CPU is the ceiling; one call carrying many
//! checks spends it better. Checks enter a queue; a background task takes whatever is waiting
//! (up to `max_batch`, grouped by cluster slot and time) and sends each group as one call, a
//! round. At most [`ROUNDS_IN_FLIGHT`] rounds are out at once: while they are, checks gather
//! in the queue and leave together with the next round, so batches grow with the load by
//! themselves. Nothing waits for a batch to fill or for a timer: a lone check goes out alone
//! and at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::connection::{Connection, store_error};
use super::program::{Entry, Program};
use super::wire::{Part, decode_checks, encode_checks};
use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;
use tollgate_core::store::StoreError;

/// The longest queue of waiting checks; past it, checks fail at once as overloaded.
pub(crate) const QUEUE_CAPACITY: usize = 65_536;

/// Rounds of calls out at once. Redis runs one call at a time, and a call's cost is mostly
/// fixed, so fewer rounds make bigger calls; but with one round, every check waits for a
/// reply to travel back before the next round can leave. Measured with `scripts/bench-redis 4`
/// (32 connections, builds alternating, a quiet machine): one round 27 167-33 191 checks/s at
/// 13.9-14.7 checks a call and 5.1-6.0 us of Redis CPU a decision; two rounds 35 884-39 085
/// at 7.5-7.7 checks a call and 5.8-6.0 us; three rounds no faster than two, with smaller
/// calls still. (On a busy machine the difference drowned in noise.)
pub(crate) const ROUNDS_IN_FLIGHT: usize = 2;

/// Rounds out at once on a Redis Cluster, where a call carries only checks of one hash slot:
/// with many identities calls rarely gather more than one check, so waiting for a round only
/// delays the next, and the masters work in parallel.
pub(crate) const CLUSTER_ROUNDS_IN_FLIGHT: usize = 4;

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
    program: Arc<Program>,
    max_batch: usize,
    timeout: Duration,
    counters: Arc<Counters>,
) -> mpsc::Sender<Job> {
    let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
    tokio::spawn(run(
        receiver,
        connection,
        program,
        max_batch.max(1),
        timeout,
        counters,
    ));
    sender
}

async fn run(
    mut queue: mpsc::Receiver<Job>,
    connection: Connection,
    program: Arc<Program>,
    max_batch: usize,
    timeout: Duration,
    counters: Arc<Counters>,
) {
    let rounds = Arc::new(Semaphore::new(if connection.is_cluster() {
        CLUSTER_ROUNDS_IN_FLIGHT
    } else {
        ROUNDS_IN_FLIGHT
    }));
    while let Some(first) = queue.recv().await {
        // Wait for room first: what arrives meanwhile joins this round.
        let Ok(permit) = Arc::clone(&rounds).acquire_owned().await else {
            return;
        };
        let mut jobs = vec![first];
        while jobs.len() < max_batch {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // A caller that gave up (timed out) no longer needs an answer: do not spend Redis on it.
        jobs.retain(|job| !job.reply.is_closed());
        let groups = group_by_destination(jobs);
        for group in &groups {
            counters.calls.fetch_add(1, Ordering::Relaxed);
            counters
                .checks
                .fetch_add(group.len() as u64, Ordering::Relaxed);
        }
        let calls: Vec<_> = groups
            .into_iter()
            .map(|group| call(connection.clone(), Arc::clone(&program), group, timeout))
            .collect();
        tokio::spawn(async move {
            join_all(calls).await;
            drop(permit);
        });
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

/// Sends one group as one call and hands each job its decisions.
async fn call(
    mut connection: Connection,
    program: Arc<Program>,
    jobs: Vec<Job>,
    timeout: Duration,
) {
    let (keys, spec) = encode_checks(jobs.iter().map(|job| &job.part));
    let counts: Vec<usize> = jobs.iter().map(|job| job.part.items.len()).collect();
    let outcome = match program
        .call::<Vec<u8>>(&mut connection, Entry::Check, &keys, jobs[0].at, &spec)
        .await
    {
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
