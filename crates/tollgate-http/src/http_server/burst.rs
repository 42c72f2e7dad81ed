//! Answers held to the end of a worker thread's burst.
//!
//! A worker thread that reads a request and decides it in the same poll would write the answer
//! at once, one write a connection as it goes. When the clients sit on the same host (a
//! sidecar, a node-local service, loopback), each such write wakes a client that has already
//! read its last answer and gone to sleep, and the writing core pays for the interrupt that
//! wakes it. So a busy thread holds each answer after its first since it last ran out of work
//! until it has polled the other connections that were ready; then they leave one after
//! another, and a client that sent several requests reads their answers in one wake-up. A
//! thread that has just woken writes its first answer at once, so a lone request never waits.
//! (Holding the request instead, undecided, does not do it: the answers then leave as far
//! apart as their decisions take, and the client sleeps between them.)
//!
//! Only threads whose runtime calls [`worker_parks`] before it parks hold answers; on any
//! other thread every answer is written at once.

use std::cell::Cell;

/// What this thread has answered since it last ran out of work.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Burst {
    /// Its runtime does not say when it parks: hold nothing.
    Unknown,
    /// Nothing yet.
    Idle,
    /// At least one answer.
    Busy,
}

thread_local! {
    static BURST: Cell<Burst> = const { Cell::new(Burst::Unknown) };
}

/// To be called by a runtime's `on_thread_park`: the thread has run out of work, so its next
/// answer is the first of a new burst.
pub fn worker_parks() {
    BURST.with(|burst| burst.set(Burst::Idle));
}

/// Whether an answer decided now, as its request was read, should be held until the thread's
/// next poll of its task: yes after this thread's first since it last parked.
pub(super) fn hold() -> bool {
    BURST.with(|burst| match burst.get() {
        Burst::Unknown => false,
        Burst::Idle => {
            burst.set(Burst::Busy);
            false
        }
        Burst::Busy => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_holds_its_answers_after_the_first_until_it_parks() {
        assert!(
            !hold(),
            "a thread whose runtime never said it parks holds nothing"
        );
        assert!(!hold());
        worker_parks();
        assert!(!hold(), "the first answer after parking is written at once");
        assert!(hold());
        assert!(hold());
        worker_parks();
        assert!(!hold());
        assert!(hold());
    }
}
