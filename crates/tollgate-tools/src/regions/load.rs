//! The load on one region: checks of the global limit sent on a fixed schedule (open loop,
//! so that a check held up by the global store shows in the latencies instead of slowing the
//! load), each answer recorded in the window it counts in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Clock, Micros, SystemClock};

use super::record::{Reading, Record, admitted_in, read, window_of};
use crate::bench::{Answer, Pacer, Schedule, Target, check_answer};

/// Counts the progress bar shows while the load runs.
#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) sent: AtomicU64,
    pub(super) admitted: AtomicU64,
}

/// How one region is driven.
pub(super) struct Load {
    pub(super) target: Arc<Target>,
    pub(super) rate: f64,
    pub(super) duration: Duration,
    pub(super) workers: usize,
    /// The global limit's window.
    pub(super) period: Micros,
    pub(super) progress: Arc<Progress>,
}

impl Load {
    /// Sends `rate` checks a second for the duration and returns what they got.
    pub(super) async fn run(self) -> Result<Record, String> {
        let pacer = Arc::new(Pacer::start(self.rate, self.duration));
        let deadline = Instant::now() + self.duration;
        let clock = Arc::new(SystemClock::new());
        let load = Arc::new(self);
        let workers: Vec<_> = (0..load.workers)
            .map(|_| {
                let (load, pacer, clock) = (Arc::clone(&load), pacer.clone(), clock.clone());
                tokio::spawn(async move { load.worker(&pacer, deadline, clock.as_ref()).await })
            })
            .collect();
        let mut record = Record::default();
        for worker in workers {
            let part = worker
                .await
                .map_err(|error| format!("a load worker failed: {error}"))?;
            record.merge(part)?;
        }
        Ok(record)
    }

    async fn worker(&self, pacer: &Pacer, deadline: Instant, clock: &dyn Clock) -> Record {
        let mut record = Record::default();
        let period = self.period;
        let mut schedule = Schedule::new(Some(pacer), deadline, &self.progress.sent);
        while let Some(turn) = schedule.next().await {
            let sent = clock.now();
            record.offered(sent, period);
            let answer = self.target.exchange(turn.n).await;
            schedule.answered(turn);
            let failure = match answer {
                Ok((status, body)) => match (check_answer(status, &body), read(&body)) {
                    (
                        _,
                        Reading {
                            undecided: Some(reason),
                            ..
                        },
                    ) => Some(reason),
                    (Answer::Allowed, reading) => {
                        let window = reading.reset_after.map_or_else(
                            || window_of(sent, period),
                            |reset| admitted_in(clock.now(), reset, period),
                        );
                        record.admit(sent, window);
                        self.progress.admitted.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    (Answer::Denied, _) => {
                        record.denied.push(sent);
                        None
                    }
                    (Answer::Failed(reason), _) => Some(reason),
                },
                Err(reason) => Some(reason),
            };
            if let Some(reason) = failure {
                record.failed += 1;
                record.first_failure.get_or_insert(reason);
            }
        }
        record.latency = schedule.into_latency();
        record
    }
}
