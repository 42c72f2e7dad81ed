//! Coalesces concurrent checks bound for the same place into one script call.
//!
//! A Lua decision costs Redis several times a plain command, and every call costs Redis about
//! as much again before its first decision, so Redis CPU is the ceiling; one call carrying many
//! checks spends it better. Checks enter a queue; a background task takes whatever is waiting
//! (up to `max_batch`, grouped by time and, on a cluster, by the master that holds their slots)
//! and sends each group as one call, a round. A call across slots reads every key before it
//! writes any, so one that Redis refuses (a slot moved since the map was read) changed nothing
//! and goes again slot by slot. At most [`ROUNDS_IN_FLIGHT`] rounds are out at once: while they
//! are, checks gather in the queue and leave together with the next round, so batches grow
//! with the load by themselves. Nothing waits for a batch to fill or for a timer: a lone check
//! goes out alone and at once.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::{BoxFuture, JoinAll, join_all};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use redis::cluster_routing::Slot;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::connection::{Connection, store_error};
use super::program::{Entry, Program, crossed_slots};
use super::slot_map::{Owners, SlotMap};
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
/// calls still. (On a busy machine the difference drowned in noise.) On a Redis Cluster a round
/// is a call per master; one, two and four rounds measured alike there (`scripts/bench-server`'s
/// cluster row alone, alternating), two with calls of 3.5 checks and 20% less Redis CPU a
/// decision than four.
pub(crate) const ROUNDS_IN_FLIGHT: usize = 2;

/// What a part's call answers: the call's time and the part's decisions.
pub(crate) type PartReply = Result<(Micros, Vec<Decision>), StoreError>;

/// One part waiting to be sent.
pub(crate) struct Job {
    pub(crate) part: Part,
    pub(crate) slot: Option<Slot>,
    pub(crate) at: Option<Micros>,
    /// When the caller stops waiting: past it, the part is answered with a timeout, whether
    /// it is still queued or its call is under way.
    pub(crate) deadline: Instant,
    pub(crate) reply: oneshot::Sender<PartReply>,
}

/// Counts of what the batcher sent, for metrics and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) calls: AtomicU64,
    pub(crate) checks: AtomicU64,
    /// Calls across slots that Redis refused (a slot had moved) and that went again slot by
    /// slot.
    pub(crate) regrouped: AtomicU64,
}

/// What every call needs.
struct Sending {
    connection: Connection,
    program: Arc<Program>,
    timeout: Duration,
    counters: Arc<Counters>,
    /// On a cluster: which master holds which slot, to put checks of several slots into one
    /// call.
    owners: Option<Arc<Owners>>,
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
    let owners = connection.is_cluster().then(|| Arc::new(Owners::default()));
    let sending = Arc::new(Sending {
        connection,
        program,
        timeout,
        counters,
        owners,
    });
    tokio::spawn(run(receiver, sending, max_batch.max(1)));
    sender
}

async fn run(mut queue: mpsc::Receiver<Job>, sending: Arc<Sending>, max_batch: usize) {
    // The rounds under way are driven here, in the batcher's own task: a round needs no task
    // of its own to be spawned, scheduled and woken, and its replies leave from where it ends.
    let mut rounds = FuturesUnordered::new();
    loop {
        let first = if rounds.len() < ROUNDS_IN_FLIGHT {
            tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
                Some(_) = rounds.next(), if !rounds.is_empty() => continue,
            }
        } else {
            // No room for another round: what arrives meanwhile joins the next one.
            rounds.next().await;
            continue;
        };
        // A caller that gave up no longer needs an answer, and one whose deadline passed while
        // the rounds before were out gets its timeout: neither is sent to Redis.
        #[allow(clippy::disallowed_methods)] // Deadlines on tokio's timer, not decisions.
        let now = Instant::now();
        let mut jobs = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next {
            if job.deadline <= now {
                let _ = job.reply.send(Err(StoreError::Timeout(sending.timeout)));
            } else if !job.reply.is_closed() {
                jobs.push(job);
            }
            next = if jobs.len() < max_batch {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        if jobs.is_empty() {
            continue;
        }
        sending
            .counters
            .checks
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        // A round that panics drops its callers' replies (they fail as the batcher stopping)
        // and ends alone, as a task of its own would: the batcher goes on.
        let round = calls(
            &sending,
            group_by_destination(jobs, sending.slot_map().as_deref()),
        );
        rounds.push(AssertUnwindSafe(round).catch_unwind());
    }
    // Every sender is gone; the rounds under way still answer their callers.
    while rounds.next().await.is_some() {}
}

impl Sending {
    /// The cluster's slot map where calls may cross slots: on a cluster, with the function
    /// library (a script cannot reach across slots). Asks for one when there is none yet.
    fn slot_map(&self) -> Option<Arc<SlotMap>> {
        let owners = self.owners.as_ref()?;
        if !self.program.uses_functions() {
            return None;
        }
        let map = owners.get();
        if map.is_none() {
            owners.refresh(&self.connection);
        }
        map
    }
}

/// Where a group of jobs goes: a master of the slot map (several slots), else one slot (or
/// the single Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destination {
    Master(u16),
    Slot(Option<Slot>),
}

/// Splits jobs into groups that can share one call: the same explicit time, and the same
/// cluster slot or, where `map` says which master holds each slot, the same master. Within a
/// group, jobs are ordered by slot, so that each slot's keys come together.
fn group_by_destination(jobs: Vec<Job>, map: Option<&SlotMap>) -> Vec<Vec<Job>> {
    let destination = |job: &Job| match (map, job.slot) {
        (Some(map), Some(slot)) => map
            .owner(slot)
            .map_or(Destination::Slot(Some(slot)), Destination::Master),
        (_, slot) => Destination::Slot(slot),
    };
    let mut groups: Vec<(Destination, Vec<Job>)> = Vec::new();
    for job in jobs {
        let to = destination(&job);
        match groups
            .iter_mut()
            .find(|(known, group)| *known == to && group[0].at == job.at)
        {
            Some((_, group)) => group.push(job),
            None => groups.push((to, vec![job])),
        }
    }
    groups
        .into_iter()
        .map(|(to, mut group)| {
            if matches!(to, Destination::Master(_)) {
                sort_by_slot(&mut group);
            }
            group
        })
        .collect()
}

/// Orders jobs so that jobs of one slot are adjacent, keeping their order within a slot.
fn sort_by_slot(jobs: &mut [Job]) {
    let mut slots: Vec<Option<Slot>> = Vec::new();
    for job in jobs.iter() {
        if !slots.contains(&job.slot) {
            slots.push(job.slot);
        }
    }
    if slots.len() > 1 {
        jobs.sort_by_key(|job| slots.iter().position(|slot| *slot == job.slot));
    }
}

/// How many of `keys`, in order, each cluster slot has; empty when they are all of one slot.
fn slot_sizes(keys: &[&str]) -> Vec<usize> {
    let mut sizes: Vec<usize> = Vec::new();
    let mut last = None;
    for key in keys {
        let slot = Slot::for_key(key.as_bytes());
        match sizes.last_mut() {
            Some(size) if last == Some(slot) => *size += 1,
            _ => sizes.push(1),
        }
        last = Some(slot);
    }
    if sizes.len() > 1 { sizes } else { Vec::new() }
}

/// Sends one group as one call and hands each job its decisions. A call across slots that
/// Redis refuses because a slot has moved wrote nothing: its jobs go again slot by slot, and
/// the slot map is read anew.
async fn call(sending: Arc<Sending>, jobs: Vec<Job>) {
    let (keys, spec) = encode_checks(jobs.iter().map(|job| &job.part), jobs[0].at);
    // The jobs know their slots (none on a single Redis): keys are hashed again only for a
    // call that spans several.
    let slots = if jobs.windows(2).any(|pair| pair[0].slot != pair[1].slot) {
        slot_sizes(&keys)
    } else {
        Vec::new()
    };
    let counts: Vec<usize> = jobs.iter().map(|job| job.part.items.len()).collect();
    let mut connection = sending.connection.clone();
    // One timer for the call, at its earliest caller's deadline, in place of one a check.
    let deadline = jobs
        .iter()
        .map(|job| job.deadline)
        .fold(jobs[0].deadline, Instant::min);
    let call = sending.program.call::<Vec<u8>>(
        &mut connection,
        Entry::Check,
        &keys,
        &slots,
        jobs[0].at,
        &spec,
    );
    let outcome = match tokio::time::timeout_at(deadline, call).await {
        Err(_) => Err(StoreError::Timeout(sending.timeout)),
        Ok(Ok(reply)) => {
            decode_checks(&reply, &counts).map_err(|error| StoreError::Failed(error.to_string()))
        }
        Ok(Err(error)) if !slots.is_empty() && crossed_slots(&error) => {
            return regroup(sending, jobs).await;
        }
        Ok(Err(error)) => Err(store_error(&error, sending.timeout)),
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

/// Sends the jobs of a refused call across slots again, one call per slot.
async fn regroup(sending: Arc<Sending>, jobs: Vec<Job>) {
    sending.counters.regrouped.fetch_add(1, Ordering::Relaxed);
    if let Some(owners) = &sending.owners {
        owners.refresh(&sending.connection);
    }
    calls(&sending, group_by_destination(jobs, None)).await;
}

/// One call for each of `groups`, counted, all under way together.
fn calls(sending: &Arc<Sending>, groups: Vec<Vec<Job>>) -> JoinAll<BoxFuture<'static, ()>> {
    sending
        .counters
        .calls
        .fetch_add(groups.len() as u64, Ordering::Relaxed);
    join_all(
        groups
            .into_iter()
            .map(|group| call(Arc::clone(sending), group).boxed()),
    )
}
