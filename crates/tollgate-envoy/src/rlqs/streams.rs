//! Envoys' streams: opened within a cap, their usage reports checked and taken, closed when
//! Envoy goes or when the service drops them.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Status;

use super::actions::{abandon, assignment, blanket};
use super::bucket::{BucketName, Target, printable};
use super::clients::{ClientId, even_part};
use super::engine::{MAX_REPORTS_PER_MESSAGE, Outbox, Rlqs};
use super::state::{Bucket, Envoy, State, Stream};
use crate::rls::RlsConfig;
use crate::rls::proto::quota::rate_limit_quota_response::BucketAction;
use crate::rls::proto::quota::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use crate::rls::proto::types::rate_limit_strategy::{BlanketRule, Strategy};

/// One bucket's usage in a message, its reports merged.
struct Usage {
    name: BucketName,
    counts: Counts,
}

/// What a bucket's reports in one message say of its use.
struct Counts {
    elapsed: Duration,
    allowed: u64,
    denied: u64,
}

/// Drops a stream from the state: its Envoy leaves its buckets (their shares are not renewed
/// and its assignments run out with their TTL), and its handler is told to end it.
pub(super) fn drop_stream(state: &mut State, stream: u64) {
    let Some(closed) = state.streams.remove(&stream) else {
        return;
    };
    closed.dropped.notify_one();
    for key in closed.buckets {
        if let Some(bucket) = state.buckets.get_mut(&key) {
            bucket.envoys.remove(&stream);
            if bucket.envoys.is_empty() {
                state.buckets.remove(&key);
            }
        }
    }
}

impl Rlqs {
    /// Opens a stream for `client`, or refuses it when the client is at its cap. At the
    /// service's cap, a client holding less than an even part takes the place of the oldest
    /// stream of the client holding the most; one holding its part is refused. The notification
    /// tells the stream's handler when the service drops it.
    pub(crate) fn open(
        &self,
        outbox: Outbox,
        peer: Option<std::net::IpAddr>,
    ) -> Result<(u64, Arc<Notify>), Status> {
        let mut state = self.state();
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let client = peer.map_or(ClientId::Stream(id), ClientId::Peer);
        let held = state.held_by(client).streams;
        let refuse = |why: String| {
            self.counters
                .refused_streams
                .fetch_add(1, Ordering::Relaxed);
            Err(Status::resource_exhausted(why))
        };
        if held >= self.tuning.max_streams_per_client {
            return refuse(format!(
                "this client holds {held} quota streams, the most one client may"
            ));
        }
        if state.streams.len() >= self.tuning.max_streams {
            let clients = state.held().len() + usize::from(held == 0);
            let victim = (held < even_part(self.tuning.max_streams, clients))
                .then(|| state.heaviest_but(client, |held| held.streams))
                .flatten();
            let Some((_, victim)) = victim else {
                return refuse(format!(
                    "{} quota streams are open, the maximum, and this client holds its part",
                    self.tuning.max_streams
                ));
            };
            drop_stream(&mut state, victim.oldest);
            self.counters
                .evicted_streams
                .fetch_add(1, Ordering::Relaxed);
        }
        let dropped = Arc::new(Notify::new());
        state.streams.insert(
            id,
            Stream {
                client,
                domain: None,
                outbox,
                buckets: HashSet::new(),
                dropped: Arc::clone(&dropped),
            },
        );
        self.counters.streams_opened.fetch_add(1, Ordering::Relaxed);
        Ok((id, dropped))
    }

    /// Whether `stream` may subscribe to the bucket `key`, which it does not hold yet: within
    /// its stream's and its client's caps, and within the service's cap on buckets, where a
    /// client holding less than an even part gets its place from the client holding the most
    /// (one of whose buckets is abandoned for it).
    fn admits_bucket(&self, state: &mut State, stream: u64, key: &str) -> bool {
        let Some(open) = state.streams.get(&stream) else {
            return false;
        };
        let client = open.client;
        if open.buckets.len() >= self.tuning.max_buckets_per_stream
            || state.held_by(client).subscriptions >= self.tuning.max_buckets_per_client
        {
            return false;
        }
        if state.buckets.contains_key(key) || state.buckets.len() < self.tuning.max_buckets {
            return true;
        }
        let clients = state.held().len();
        if state.held_by(client).subscriptions >= even_part(self.tuning.max_buckets, clients) {
            return false;
        }
        let Some((heaviest, _)) = state.heaviest_but(client, |held| held.subscriptions) else {
            return false;
        };
        self.abandon_one_of(state, heaviest)
    }

    /// Abandons one bucket held by `client` alone, to make room: its subscribers are told.
    fn abandon_one_of(&self, state: &mut State, client: ClientId) -> bool {
        let streams = &state.streams;
        let held_alone = state.buckets.iter().find(|(_, bucket)| {
            bucket
                .envoys
                .keys()
                .all(|subscriber| streams.get(subscriber).is_some_and(|s| s.client == client))
        });
        let Some((key, _)) = held_alone else {
            return false;
        };
        let key = key.clone();
        let Some(bucket) = state.buckets.remove(&key) else {
            return false;
        };
        for subscriber in bucket.envoys.keys() {
            if let Some(open) = state.streams.get_mut(subscriber) {
                open.buckets.remove(&key);
                let message = RateLimitQuotaResponse {
                    bucket_action: vec![abandon(&bucket.name)],
                };
                let _ = open.outbox.try_send(Ok(message));
            }
        }
        self.counters
            .evicted_buckets
            .fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forgets a stream that ended.
    pub(crate) fn close(&self, stream: u64) {
        drop_stream(&mut self.state(), stream);
    }

    /// The stream's domain: named by its first message, the same (or unnamed) after, and
    /// still configured.
    fn domain_of(
        open: &Stream,
        message: &RateLimitQuotaUsageReports,
        configured: impl Fn(&str) -> bool,
    ) -> Result<String, Status> {
        match (&open.domain, message.domain.as_str()) {
            (None, "") => Err(Status::invalid_argument(
                "the first message of a stream must name its domain",
            )),
            (None, domain) if !configured(domain) => Err(Status::not_found(format!(
                "domain {:?} is not configured",
                printable(domain)
            ))),
            (None, domain) => Ok(domain.to_owned()),
            (Some(domain), _) if !configured(domain) => Err(Status::not_found(format!(
                "domain {domain:?} is no longer configured"
            ))),
            (Some(domain), other) if other.is_empty() || other == domain => Ok(domain.clone()),
            (Some(domain), other) => Err(Status::invalid_argument(format!(
                "the stream's domain is {domain:?}; to report for {:?}, open another stream",
                printable(other)
            ))),
        }
    }

    /// Checks every report of a message, merging reports of the same bucket, before any is
    /// taken, so that a bad message changes nothing.
    fn usages(domain: &str, message: &RateLimitQuotaUsageReports) -> Result<Vec<Usage>, Status> {
        let reports = &message.bucket_quota_usages;
        if reports.is_empty() {
            return Err(Status::invalid_argument(
                "a message must carry at least one bucket_quota_usage",
            ));
        }
        if reports.len() > MAX_REPORTS_PER_MESSAGE {
            return Err(Status::invalid_argument(format!(
                "{} usage reports in one message, the maximum is {MAX_REPORTS_PER_MESSAGE}",
                reports.len()
            )));
        }
        let mut usages: Vec<Usage> = Vec::with_capacity(reports.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (index, report) in reports.iter().enumerate() {
            let name = BucketName::new(domain, report.bucket_id.as_ref())
                .map_err(|error| Status::invalid_argument(format!("report {index}: {error}")))?;
            // Envoy's first report of a bucket, which subscribes it, carries no time.
            let elapsed = match report.time_elapsed {
                None => Duration::ZERO,
                Some(elapsed) => Duration::try_from(elapsed).map_err(|_| {
                    Status::invalid_argument(format!(
                        "report {index}: time_elapsed must not be negative"
                    ))
                })?,
            };
            let (allowed, denied) = (report.num_requests_allowed, report.num_requests_denied);
            match seen.get(&name.key) {
                Some(&at) => {
                    let merged = &mut usages[at].counts;
                    merged.allowed = merged.allowed.saturating_add(allowed);
                    merged.denied = merged.denied.saturating_add(denied);
                    merged.elapsed = merged.elapsed.max(elapsed);
                }
                None => {
                    seen.insert(name.key.clone(), usages.len());
                    usages.push(Usage {
                        name,
                        counts: Counts {
                            elapsed,
                            allowed,
                            denied,
                        },
                    });
                }
            }
        }
        Ok(usages)
    }

    /// Takes one message of usage reports. A malformed message is refused whole, with the
    /// status that ends its stream; other streams are not touched. A bucket past a cap is
    /// denied on its own (not tracked, its stream kept), so that a burst of new buckets
    /// neither ends the stream that reported it nor takes room from anyone else's.
    pub(crate) fn report(
        &self,
        stream: u64,
        message: &RateLimitQuotaUsageReports,
    ) -> Result<(), Status> {
        let config = self.rls.config();
        let now = Instant::now();
        let mut state = self.state();
        let state = &mut *state;
        let Some(open) = state.streams.get_mut(&stream) else {
            return Err(Status::aborted("the stream was dropped"));
        };
        let domain = Self::domain_of(open, message, |domain| config.domains.contains_key(domain))?;
        let usages = Self::usages(&domain, message)?;
        open.domain = Some(domain.clone());
        let outbox = open.outbox.clone();
        let mut immediate = Vec::new();
        let mut woken = false;
        for usage in usages {
            let known = state
                .streams
                .get(&stream)
                .is_some_and(|open| open.buckets.contains(&usage.name.key));
            if !known && !self.admits_bucket(state, stream, &usage.name.key) {
                self.counters
                    .refused_buckets
                    .fetch_add(1, Ordering::Relaxed);
                let deny = Strategy::BlanketRule(BlanketRule::DenyAll as i32);
                immediate.push(assignment(&usage.name, deny, self.ttl()));
                continue;
            }
            let Some(open) = state.streams.get_mut(&stream) else {
                break;
            };
            let Usage { name, counts } = usage;
            let Some(bucket) = self.bucket_of(&mut state.buckets, &config, &domain, name) else {
                continue;
            };
            open.buckets.insert(bucket.name.key.clone());
            match bucket.envoys.get_mut(&stream) {
                Some(envoy) => envoy.take(&bucket.target, &counts, now),
                None => {
                    woken |= self.join(bucket, stream, open.client, now, &mut immediate);
                }
            }
        }
        if !immediate.is_empty() {
            self.counters
                .assignments
                .fetch_add(immediate.len() as u64, Ordering::Relaxed);
            if outbox
                .try_send(Ok(RateLimitQuotaResponse {
                    bucket_action: immediate,
                }))
                .is_err()
            {
                drop_stream(state, stream);
            }
        }
        if woken {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The bucket `name` is counted in: the one tracked, or a new one if the domain's
    /// configuration matches it (none if it does not).
    fn bucket_of<'a>(
        &self,
        buckets: &'a mut HashMap<String, Bucket>,
        config: &RlsConfig,
        domain: &str,
        name: BucketName,
    ) -> Option<&'a mut Bucket> {
        match buckets.entry(name.key.clone()) {
            Entry::Occupied(found) => Some(found.into_mut()),
            Entry::Vacant(free) => {
                let (target, counter) = Target::resolve(config, domain, &name, self.tuning.period)?;
                Some(free.insert(Bucket {
                    name,
                    domain: domain.to_owned(),
                    target,
                    counter,
                    envoys: HashMap::new(),
                    exhausted: false,
                    demand_reported: false,
                    total_demand: 0,
                }))
            }
        }
    }

    /// A stream's first report of `bucket`: its Envoy joins it. A shared bucket's Envoy wants
    /// the whole limit until it reports over time, and growth assigns it its first share (so
    /// the engine is woken: returns true); a blanket rule is sent at once, into `immediate`.
    fn join(
        &self,
        bucket: &mut Bucket,
        stream: u64,
        client: ClientId,
        now: Instant,
        immediate: &mut Vec<BucketAction>,
    ) -> bool {
        let (demand, assigned, woken) = match &bucket.target {
            // A new Envoy wants the whole limit until it reports over time.
            Target::Share(shared) => (shared.quota as f64, false, true),
            // A blanket rule needs no share: sent at once.
            target => {
                immediate.push(assignment(&bucket.name, blanket(target), self.ttl()));
                (0.0, true, false)
            }
        };
        bucket.envoys.insert(
            stream,
            Envoy {
                client,
                demand,
                share: 0,
                last_active: now,
                last_report: now,
                assigned,
            },
        );
        woken
    }
}

impl Envoy {
    /// Takes a report of the Envoy's use: its demand is smoothed toward what it reports, and
    /// it counts as active if it reports any request.
    fn take(&mut self, target: &Target, counts: &Counts, now: Instant) {
        // The time is the longer of what Envoy says and what passed here since its last
        // report, so that a short time cannot inflate its demand.
        let elapsed = counts.elapsed.max(now.duration_since(self.last_report));
        let share = self.assigned.then_some(self.share);
        if let Some(demand) = target.demand(counts.allowed, counts.denied, elapsed, share) {
            self.demand = (self.demand + demand) / 2.0;
        }
        self.last_report = now;
        if counts.allowed > 0 || counts.denied > 0 {
            self.last_active = now;
        }
    }
}
